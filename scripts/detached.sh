# Sourced by scripts that start daemons (scripts/setup.sh): `detached CMD ARGS...` runs CMD with
# every descriptor of this shell above 2 closed and in a session of its own, and returns its exit
# status. Whatever CMD leaves running (ovsdb-server, ovs-vswitchd) then holds nothing its caller had
# open: `flock LOCK make setup` would otherwise leave Open vSwitch holding LOCK for as long as it runs.
detached() {
  (
    for fd_path in /proc/self/fd/*; do      # /proc/self: this subshell (the glob's own descriptor is gone by now)
      fd=${fd_path##*/}
      if [ "$fd" -gt 2 ]; then exec {fd}>&-; fi
    done
    exec setsid --wait "$@"                 # --wait: setsid forks only when the subshell leads a process group
  )
}
