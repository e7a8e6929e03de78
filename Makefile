# fabriclab: see README.md. Every target that touches the network needs root (sudo).
SHELL := /bin/bash
PY := .venv/bin/python
SCENARIO ?= experiments/scenarios/incast.yaml
COMPARISON ?= experiments/scenarios/compare-topologies.yaml
RESULTS ?= results
PYTEST_ARGS ?=
#: JUnit XML of each lane's last run (make test-times reads them)
TEST_REPORTS ?= test-reports
#: make test-repeat: runs, the -k selection, a CPU-heavy process beside them (LOAD=0: none), VM=1: in the VM
N ?= 10
K ?=
LOAD ?= 1
VM ?= 0

.PHONY: lab-check allreduce hierarchical training mixed-parallel study diagnose bench-diagnose help test-times test-repeat test-repeat-args setup bpf experiment pfc roce k-sweep compare draw test unit clean bench bench-fabric bench-watch bench-rounds bench-restore bench-shaper bench-sampler bench-forwarding bench-ovstx bench-ecn bench-pfc bench-roce bench-collective check-root distclean vm-image vm-test vm-experiment

help:
	@echo "sudo make experiment [SCENARIO=file.yaml]  run an experiment (default: incast, drop-tail / ECN / PFC / ECN+PFC), results in $(RESULTS)/"
	@echo "sudo make pfc                             PFC: an 8:1 lossless-class UDP incast, PFC off then on (pauses.csv, pause plots)"
	@echo "sudo make roce                            RoCEv2: an 8:1 incast of Poisson responses, DCQCN then open loop, 3 seeds each"
	@echo "sudo make allreduce                       ring AllReduce of real arrays, rack-local vs spread ranks on a 3:1 Spine-Leaf"
	@echo "sudo make hierarchical                    flat ring vs hierarchical AllReduce on 4 GPU servers x 4 GPUs, rail-optimised"
	@echo "sudo make training                        DDP training iterations: overlap off/on, fp16, int8, top-k on the wire"
	@echo "sudo make mixed-parallel                  tensor x pipeline x data parallelism: each link's bytes by kind, heat map"
	@echo "sudo make k-sweep                         ECN K sweep: the incast at K = 5..65 packets on one fabric"
	@echo "sudo make compare [COMPARISON=file.yaml]  same traffic on Fat-Tree k=4 and 3:1 Spine-Leaf, side-by-side plots"
	@echo "sudo make study [STUDY=file.yaml]          variants x seeds, compared per seed (paired statistics, report.html)"
	@echo "sudo make diagnose [SEED=n]                a hidden random fault on a k=4 Fat-Tree, found by bisection, then revealed"
	@echo "make draw [SCENARIO=file.yaml]            draw the scenario's fabric to $(RESULTS)/topology.png (no root)"
	@echo "sudo make test                            install what is missing, run the whole test suite (host lane)"
	@echo "make test-times                           table of test -> seconds for each lane's last run"
	@echo "sudo make test-repeat N=10 K='expr'       run the tests pytest -k selects N times (under load); pass counts, figures"
	@echo "sudo make setup                           install apt + pip dependencies, start Open vSwitch (idempotent)"
	@echo "make unit                                 unit tests only (no root; needs a prior setup)"
	@echo "sudo make bench                           time the default experiment and the queue sampler"
	@echo "sudo make bench-ecn                       forwarding throughput of a port with the ECN marker on vs off"
	@echo "sudo make bench-pfc                       PFC reaction latency (XOFF -> upstream paused) during incasts, vs a bare gate change"
	@echo "sudo make bench-roce                      RoCEv2 sender packets/s (1 KB payloads) beside scapy's sendp, same run"
	@echo "sudo make bench-diagnose                  time to diagnosis of hidden faults on Fat-Tree k=4 and k=6"
	@echo "sudo make bench-collective                16-rank ring AllReduce busbw vs 16 plain flows on the same connections (Fat-Tree k=4)"
	@echo "make bpf                                  compile the BPF programs (ECN marker, PFC accounting, queue sampler, checks) to build/ (setup does it)"
	@echo "sudo make bench-fabric                    bring-up and teardown per phase, growth with the ports (Fat-Tree k=4,6,8; Spine-Leaf 4x8)"
	@echo "sudo make bench-forwarding                k=4 Fat-Tree permutation: goodput vs the hash-ECMP model, switch-hop forwarding ceiling, per OVS setting"
	@echo "sudo make bench-sampler                   queue sampler rate and CPU on 40 and 640 shaped ports: BPF array vs netlink dump"
	@echo "sudo make bench-watch                     CPU per read of the round's watchers (qdisc trees, CPU headroom) vs the queue sampler's read"
	@echo "sudo make bench-rounds [BASELINE=ref] [SCENARIO=f]  seconds per short round, set-up and whole run, vs an earlier commit, same run"
	@echo "sudo make bench-restore                   wall time of the check that puts each round's data plane back to the plan (Fat-Tree k=4)"
	@echo "sudo make bench-ovstx                     cost per system call of the userspace datapath's transmit count, vs a bare call"
	@echo "sudo make bench-shaper                    how far ports run ahead of their line (any window, idle gaps included) and their spacing, idle and under CPU load"
	@echo "sudo make vm-image                        build (or reuse) the stock-kernel VM image (cached in /var/cache/fabriclab/vm)"
	@echo "sudo make vm-test                         run the test suite inside the stock-kernel VM"
	@echo "sudo make vm-experiment [SCENARIO=...]    run an experiment inside the VM; results come back to $(RESULTS)/"
	@echo "make lab-check LAB=N RESULTS=dir [ANSWERS=file]   score a coursework lab's answers against your results (labs/)"
	@echo "sudo make clean                           remove fabriclab's emulation state left by a killed run"
	@echo "sudo make distclean                       clean, and remove .venv (and the fabriclab command)"

#: make lab-check LAB=N RESULTS=dir [ANSWERS=file]: score a lab's answers against your results (no root)
LAB ?=
ANSWERS ?=
lab-check:
	@if [ -z "$(LAB)" ]; then echo "fabriclab: make lab-check LAB=N RESULTS=dir [ANSWERS=file] (labs: $(PY) -m experiments lab list)" >&2; exit 2; fi
	$(PY) -m experiments lab check $(LAB) --results $(RESULTS) $(if $(ANSWERS),--answers $(ANSWERS),)

check-root:
	@if [ "$$(id -u)" != 0 ]; then echo "fabriclab: this target needs root: run it with sudo (e.g. sudo make $(MAKECMDGOALS))" >&2; exit 2; fi

setup: check-root
	@bash scripts/setup.sh

experiment: check-root setup
	$(PY) -m experiments run $(SCENARIO) --results $(RESULTS)

pfc: check-root setup
	$(PY) -m experiments run experiments/scenarios/pfc-incast.yaml --results $(RESULTS)

roce: check-root setup
	$(PY) -m experiments run experiments/scenarios/roce-incast.yaml --results $(RESULTS)

allreduce: check-root setup
	$(PY) -m experiments run experiments/scenarios/allreduce-placement.yaml --results $(RESULTS)

hierarchical: check-root setup
	$(PY) -m experiments run experiments/scenarios/hierarchical-rail.yaml --results $(RESULTS)

training: check-root setup
	$(PY) -m experiments run experiments/scenarios/training.yaml --results $(RESULTS)

mixed-parallel: check-root setup
	$(PY) -m experiments run experiments/scenarios/mixed-parallel.yaml --results $(RESULTS)

k-sweep: check-root setup
	$(PY) -m experiments run experiments/scenarios/k-sweep.yaml --results $(RESULTS)

bpf:
	@bash scripts/build-bpf.sh

compare: check-root setup
	$(PY) -m experiments compare $(COMPARISON) --results $(RESULTS)

# A study: variants x sweep x seeds on this machine, compared per seed (docs/studies.md).
STUDY ?= experiments/studies/ecn-vs-droptail.yaml
study: check-root setup
	$(PY) -m experiments study $(STUDY) --results $(RESULTS)

# The troubleshooter on a hidden random fault (docs/faults.md); exit 1 when its verdict is wrong.
SEED ?= 0
diagnose: check-root setup
	$(PY) -m experiments diagnose --inject random --seed $(SEED) --results $(RESULTS)

draw:
	@test -x $(PY) || { echo "fabriclab: no .venv yet: run sudo make setup first" >&2; exit 2; }
	@mkdir -p $(RESULTS)
	$(PY) -m experiments draw $(SCENARIO) --out $(RESULTS)/topology.png

#: make test: the unit tier on both cores (pytest-xdist, one worker per test file), then the live tier
#: one test at a time (one fabric per machine); both always run, and either failing fails the target.
test: check-root setup
	@mkdir -p $(TEST_REPORTS)
	@rc=0; \
	TEST_REPORTS=$(TEST_REPORTS) $(PY) -m pytest tests/unit -n 2 --dist loadfile --durations=10 --junitxml=$(TEST_REPORTS)/host-unit.xml $(PYTEST_ARGS) || rc=1; \
	TEST_REPORTS=$(TEST_REPORTS) $(PY) -m pytest tests --ignore=tests/unit --durations=25 --junitxml=$(TEST_REPORTS)/host.xml $(PYTEST_ARGS) || rc=1; \
	exit $$rc

test-times:
	@python3 scripts/test_times.py $(wildcard $(TEST_REPORTS)/*.xml)

test-repeat-args:
	@test -n "$(K)" || { echo "fabriclab: say which tests: sudo make test-repeat N=10 K='pfc and watchdog'" >&2; exit 2; }

test-repeat: check-root test-repeat-args setup
	$(PY) scripts/test_repeat.py -n $(N) -k "$(K)" $(if $(filter 0,$(LOAD)),--no-load) $(if $(filter 1,$(VM)),--vm) $(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

unit:
	@test -x $(PY) || { echo "fabriclab: no .venv yet: run sudo make setup first" >&2; exit 2; }
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

bench: check-root setup
	$(PY) bench/bench_experiment.py

bench-fabric: check-root setup
	$(PY) bench/bench_fabric_up.py

bench-forwarding: check-root setup
	$(PY) bench/bench_forwarding.py

bench-sampler: check-root setup
	$(PY) bench/bench_sampler.py

bench-watch: check-root setup
	$(PY) bench/bench_watch.py

bench-rounds: check-root setup
	$(PY) bench/bench_round_overhead.py --baseline $(or $(BASELINE),HEAD~1) $(if $(SCENARIO),--scenario $(SCENARIO))

bench-restore: check-root setup
	$(PY) bench/bench_restore.py

bench-ovstx: check-root setup
	$(PY) bench/bench_ovstx.py

bench-shaper: check-root setup
	$(PY) bench/bench_shaper_ceiling.py --runs 10
	$(PY) bench/bench_shaper_ceiling.py --runs 10 --load

bench-ecn: check-root setup
	$(PY) bench/bench_ecn_marker.py

bench-pfc: check-root setup
	$(PY) bench/bench_pfc_reaction.py

bench-roce: check-root setup
	$(PY) bench/bench_roce_sender.py

bench-collective: check-root setup
	$(PY) bench/bench_collective.py

bench-diagnose: check-root setup
	$(PY) bench/bench_diagnose.py

clean: check-root
	@if [ -x $(PY) ]; then $(PY) -m experiments clean; else echo "fabriclab: nothing to clean (no .venv)"; fi

distclean: clean
	@if [ -L /usr/local/bin/fabriclab ] && [ "$$(readlink /usr/local/bin/fabriclab)" = "$(CURDIR)/.venv/bin/fabriclab" ]; then rm /usr/local/bin/fabriclab; fi
	rm -rf .venv

vm-image: check-root
	@bash vm/build-image.sh >/dev/null

vm-test: check-root setup vm-image
	@mkdir -p $(TEST_REPORTS)
	FABRICLAB_VM_IMAGE_TESTS=1 $(PY) -m pytest tests/vm -v --durations=5 --junitxml=$(TEST_REPORTS)/vm-host-side.xml
	$(PY) vm/run.py test --results $(RESULTS) --junitxml $(TEST_REPORTS)/vm.xml -- --durations=25 $(PYTEST_ARGS)

vm-experiment: check-root bpf vm-image
	/usr/bin/python3 vm/run.py experiment --scenario $(SCENARIO) --results $(RESULTS)
