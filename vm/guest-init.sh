#!/bin/sh
# PID 1 of the fabriclab VM lane guest (the image's /usr/local/sbin/fabriclab-vm-init).
#
# Mounts the job disk (/dev/vdb, ext4) at /job, brings up what Mininet and
# Open vSwitch need, runs /job/run.sh with its output on the serial console
# and in /job/out/console.log, writes its exit status to /job/out/status,
# and powers off. The guest has no network beyond loopback.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mkdir -p /run/lock /job
hostname fabriclab-vm
ip link set lo up
echo "FABRICLAB-VM-BOOTED $(uname -r)"
if ! mount -t ext4 /dev/vdb /job; then
  echo "FABRICLAB-VM-NO-JOB-DISK"
  echo o > /proc/sysrq-trigger
fi
mkdir -p /job/out
/usr/share/openvswitch/scripts/ovs-ctl start --system-id=random > /job/out/ovs-start.log 2>&1
status=1
if [ -x /job/run.sh ]; then
  /job/run.sh 2>&1 | tee /job/out/console.log
  status=$(cat /job/out/status 2>/dev/null || echo 1)
fi
echo "FABRICLAB-VM-DONE status=$status"
/usr/share/openvswitch/scripts/ovs-ctl stop > /dev/null 2>&1
sync
umount /job
sync
echo o > /proc/sysrq-trigger
sleep 10
