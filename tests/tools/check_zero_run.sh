#!/usr/bin/env bash
# zero-run's behaviour, one ctest test per case: check_zero_run.sh ZERO_RUN CASE.
# The dry_run_* and usage cases use a stand-in mpirun and need no Open MPI; the run_* and
# signal_* cases start real ranks through Open MPI's mpirun and exit 77 (ctest: skipped) when
# there is none on PATH. Expected values are worked out here from the CPUs this test may use,
# or pinned with taskset, so the cases hold on any machine.
# shellcheck disable=SC2016  # single-quoted $VARS are for the ranks' sh to expand
set -euo pipefail

tool=$1
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMP_NUM_THREADS ZERO_MPIRUN

fail() {
  echo "FAIL ($case_name): $*" >&2
  exit 1
}

# The stand-in mpirun leaves a mark if anything runs it; --dry-run must not.
mkdir -p "$work/bin"
printf '#!/bin/sh\ntouch "%s/mpirun-ran"\n' "$work" >"$work/bin/mpirun"
chmod +x "$work/bin/mpirun"

# Runs zero-run; sets out, err and rc. (Reads with bash alone: some cases empty PATH.)
run() {
  rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  out=$(<"$work/out")
  err=$(<"$work/err")
}
dry() { run "$tool" --mpirun "$work/bin/mpirun" --dry-run "$@"; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1; stdout: $out; stderr: $err"; }
expect_out() { [[ "$out" == *"$1"* ]] || fail "stdout lacks '$1': $out"; }
expect_no_out() { [[ "$out" != *"$1"* ]] || fail "stdout has '$1': $out"; }
expect_err() { [[ "$err" == *"$1"* ]] || fail "stderr lacks '$1': $err"; }
max1() { if [ "$1" -lt 1 ]; then echo 1; else echo "$1"; fi; }

# The CPUs this process may use and the physical cores behind them (SMT siblings are one).
cpus=$(nproc)
cores=$(
  list=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
  for range in ${list//,/ }; do seq "${range%-*}" "${range#*-}"; done |
    while read -r cpu; do cat "/sys/devices/system/cpu/cpu$cpu/topology/thread_siblings_list"; done |
    sort -u | wc -l
)

expect_root_exports() {
  if [ "$(id -u)" -eq 0 ]; then
    expect_out "export OMPI_ALLOW_RUN_AS_ROOT=1"
    expect_out "export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  else
    expect_no_out "OMPI_ALLOW_RUN_AS_ROOT"
  fi
}

need_mpirun() {
  command -v mpirun >/dev/null || {
    echo "no mpirun on PATH: install Open MPI (openmpi-bin) to run this case"
    exit 77
  }
}

# Waits (at most 5 s) until every file named exists.
wait_for_files() {
  for _ in $(seq 50); do
    local missing=0
    for file in "$@"; do [ -s "$file" ] || missing=1; done
    [ "$missing" -eq 0 ] && return 0
    sleep 0.1
  done
  fail "the ranks did not start: $* missing"
}

# Fails unless each pid (read from the files named) ends within 5 s (a zombie has ended).
expect_ended() {
  for file in "$@"; do
    local pid
    pid=$(cat "$file")
    for _ in $(seq 50); do
      local state
      state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone)
      [ "$state" = gone ] || [ "$state" = Z ] && continue 2
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    fail "process $pid (from $file) still runs"
  done
}

case "$case_name" in
  dry_run_three_ranks_on_one_cpu)
    run taskset -c 0 "$tool" --mpirun "$work/bin/mpirun" --dry-run -n 3 -- sh -c 'echo a b'
    expect_rc 0
    expect_out "$work/bin/mpirun -n 3 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x ZERO_LAUNCHER=zero-run -x ZERO_START_TIMEOUT=300 -x ZERO_START_DIR=${TMPDIR:-/tmp}/zero-run-start.XXXXXX -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=PORT -- sh -c 'echo a b'"
    expect_out "mode=mpirun ranks=3 ranks_per_node=3 cpus=1 cores=1"
    expect_root_exports
    [ ! -e "$work/mpirun-ran" ] || fail "--dry-run ran mpirun"
    ;;

  dry_run_omp_threads_share_the_cpus)
    dry -n 2 -- ./train
    expect_rc 0
    expect_out "cpus=$cpus cores=$cores"
    expect_out "-x OMP_NUM_THREADS=$(max1 $((cpus / 2))) -x ZERO_LAUNCHER=zero-run"
    expect_out " --bind-to none "
    # One rank through mpirun (an --mpi-arg forces mpirun) gets every CPU.
    dry -n 1 --mpi-arg=--report-bindings -- ./train
    expect_out "-n 1 --bind-to none -x OMP_NUM_THREADS=$cpus -x ZERO_LAUNCHER=zero-run -x ZERO_START_TIMEOUT=300 -x ZERO_START_DIR=${TMPDIR:-/tmp}/zero-run-start.XXXXXX -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=PORT --report-bindings -- ./train"
    # torch.distributed's rendezvous: a free port, not 29500; the user's own is kept.
    MASTER_PORT=4321 MASTER_ADDR=node0 dry -n 2 -- ./train
    expect_no_out "MASTER_PORT="
    expect_no_out "MASTER_ADDR="
    # A value the user set is kept and passed on by name.
    OMP_NUM_THREADS=3 dry -n 2 -- ./train
    expect_out "-x OMP_NUM_THREADS -x ZERO_LAUNCHER=zero-run"
    expect_no_out "OMP_NUM_THREADS="
    ;;

  dry_run_oversubscribes_past_the_cores)
    dry -n $((cores + 1)) -- ./train
    expect_rc 0
    expect_out "-n $((cores + 1)) --oversubscribe --bind-to none"
    expect_out "oversubscribed=yes"
    dry -n "$cores" --mpi-arg=-v -- ./train
    expect_rc 0
    expect_no_out "--oversubscribe"
    expect_out "oversubscribed=no"
    ;;

  dry_run_hostfile)
    printf 'node1 # a comment\n\n# another\nnode2\n' >"$work/hosts"
    dry -n 64 --hostfile "$work/hosts" -- ./train
    expect_rc 0
    expect_out "-n 64 --hostfile $work/hosts --bind-to none -x OMP_NUM_THREADS=$(max1 $((cpus / 32)))"
    expect_out "ranks_per_node=32"
    expect_no_out "--oversubscribe"
    # Other nodes do not see this one's $TMPDIR: no arrival directory unless --start-dir.
    expect_no_out "ZERO_START_DIR"
    # Each rank runs under zero-run's supervisor, which reports to zero-run.
    expect_out "-x ZERO_RUN_REPORT=HOST:PORT -x MASTER_ADDR=$(awk '!/^#/ && NF {print $1; exit}' "$work/hosts") -x MASTER_PORT=PORT -- $(readlink -f "$tool") --supervise -- ./train"
    expect_out "-x ZERO_START_TIMEOUT=300"
    dry -n 4 --hostfile "$work/hosts" --start-dir /shared/start -- ./train
    expect_out "-x ZERO_START_DIR=/shared/start/zero-run-start.XXXXXX"
    # With slots, Open MPI fills the first host's slots first: min(N, largest slots).
    printf 'node1 slots=3\nnode2 slots=2\n' >"$work/slots"
    dry -n 5 --hostfile "$work/slots" -- ./train
    expect_out "ranks_per_node=3"
    expect_out "-x OMP_NUM_THREADS=$(max1 $((cpus / 3)))"
    # One rank with a hostfile still goes through mpirun.
    dry -n 1 --hostfile "$work/hosts" -- ./train
    expect_out "mode=mpirun"
    dry -n 2 --hostfile "$work/missing" -- ./train
    expect_rc 2
    expect_err "--hostfile $work/missing: cannot read the file"
    printf 'node1 slots=x\n' >"$work/bad"
    dry -n 2 --hostfile "$work/bad" -- ./train
    expect_rc 2
    expect_err "$work/bad:1: 'slots=x' is not a valid slot count"
    ;;

  dry_run_start_up)
    dry -n 2 --start-timeout 7.5 -- ./train
    expect_rc 0
    expect_out "-x ZERO_START_TIMEOUT=7.5 -x ZERO_START_DIR="
    TMPDIR=/var/tmp dry -n 2 -- ./train
    expect_out "-x ZERO_START_DIR=/var/tmp/zero-run-start.XXXXXX"
    # One rank run directly waits for nobody.
    dry -n 1 -- ./train
    expect_no_out "ZERO_START"
    dry -n 2 --start-timeout 0 -- ./train
    expect_rc 2
    expect_err "--start-timeout"
    # A real run makes the directory, gives it to the ranks and removes it afterwards.
    if command -v mpirun >/dev/null; then
      mkdir "$work/starts"
      run "$tool" -n 2 --start-dir "$work/starts" -- sh -c 'touch $ZERO_START_DIR/rank$OMPI_COMM_WORLD_RANK; echo dir $ZERO_START_DIR'
      expect_rc 0
      expect_out "dir $work/starts/zero-run-start."
      [ -z "$(ls -A "$work/starts")" ] || fail "the start directory was left: $(ls -A "$work/starts")"
    fi
    ;;

  dry_run_bind_cores)
    dry -n 1 --bind-cores --mpi-arg=-v -- ./train
    expect_rc 0
    expect_out "-n 1 --map-by slot:PE=$cores --bind-to core -x OMP_NUM_THREADS=$cpus"
    expect_no_out "--bind-to none"
    printf 'node1\nnode2\n' >"$work/hosts"
    dry -n 4 --bind-cores --hostfile "$work/hosts" -- ./train
    expect_rc 0
    expect_out "--map-by slot:PE=$(max1 $((cores / 2))) --bind-to core"
    ;;

  dry_run_bind_cores_refused_when_oversubscribed)
    run taskset -c 0 "$tool" --mpirun "$work/bin/mpirun" --dry-run -n 2 --bind-cores -- ./train
    expect_rc 2
    expect_err "--bind-cores: 2 ranks do not fit on the 1 cores here"
    [ -z "$out" ] || fail "printed a command line: $out"
    ;;

  usage_errors)
    dry -n 2
    expect_rc 2
    expect_err "no COMMAND: give it after --"
    dry -n 2 --
    expect_rc 2
    expect_err "no COMMAND after --"
    dry -- ./train
    expect_rc 2
    expect_err "--np is required"
    dry -n 0 -- ./train
    expect_rc 2
    dry -n 2 --no-such-option -- ./train
    expect_rc 2
    ;;

  help_names_every_option)
    run "$tool" --help
    expect_rc 0
    for word in -n,--np --hostfile --bind-cores --mpirun --mpi-arg --dry-run ZERO_MPIRUN \
      --start-timeout --start-dir ZERO_START_TIMEOUT ZERO_START_DIR "exit status 124" \
      "--supervise" ZERO_RUN_REPORT ZERO_RUN_REPORT_HOST "was killed by signal" \
      OMPI_ALLOW_RUN_AS_ROOT --oversubscribe OMP_NUM_THREADS "--bind-to none" "PE=k" \
      ZERO_LAUNCHER SIGTERM SIGUSR2 "ends the other ranks" "srun -n N COMMAND" SLURM_PROCID \
      --as-deepspeed --no-local-rank LOCAL_RANK WORLD_SIZE "--local_rank=N"; do
      expect_out "$word"
    done
    ;;

  finds_mpirun)
    PATH="$work/bin:$PATH" run "$tool" --dry-run -n 2 -- ./train
    expect_rc 0
    expect_out "$work/bin/mpirun -n 2 "
    cp "$work/bin/mpirun" "$work/other-mpirun"
    ZERO_MPIRUN="$work/other-mpirun" run "$tool" --dry-run -n 2 -- ./train
    expect_out "$work/other-mpirun -n 2 "
    ZERO_MPIRUN="$work/other-mpirun" dry -n 2 -- ./train
    expect_out "$work/bin/mpirun -n 2 "
    PATH="$work/empty" run "$tool" --dry-run -n 2 -- ./train
    expect_rc 127
    expect_err "cannot find mpirun ('mpirun' is not an executable file on PATH)"
    run "$tool" --mpirun "$work" --dry-run -n 2 -- ./train
    expect_rc 127
    # One rank runs the command directly and needs no mpirun.
    PATH="$work/empty" run "$tool" --dry-run -n 1 -- ./train 'a b'
    expect_rc 0
    expect_out "mode=direct"
    expect_out "export OMP_NUM_THREADS=$cpus"
    expect_out "export ZERO_LAUNCHER=zero-run"
    expect_out "./train 'a b'"
    expect_no_out "OMPI_ALLOW_RUN_AS_ROOT"
    ;;

  run_two_ranks)
    need_mpirun
    run "$tool" -n 2 -- sh -c 'echo rank $OMPI_COMM_WORLD_RANK omp $OMP_NUM_THREADS $ZERO_LAUNCHER'
    expect_rc 0
    k=$(max1 $((cpus / 2)))
    expect_out "rank 0 omp $k zero-run"
    expect_out "rank 1 omp $k zero-run"
    ;;

  run_as_deepspeed)
    # DeepSpeed's launcher's variables per rank, --local_rank=N after the arguments, and the
    # as-deepspeed folder beside zero-run first on PYTHONPATH, the user's own after it.
    need_mpirun
    shim="$(cd "$(dirname "$tool")" && pwd)/as-deepspeed"
    [ -f "$shim/deepspeed/__init__.py" ] || fail "no $shim/deepspeed/__init__.py beside zero-run"
    show='echo rank $RANK local $LOCAL_RANK world $WORLD_SIZE path $PYTHONPATH mode $ZERO_AS_DEEPSPEED args "$@"'
    PYTHONPATH=/mine run "$tool" --as-deepspeed -n 2 -- sh -c "$show" sh a
    expect_rc 0
    expect_out "rank 0 local 0 world 2 path $shim:/mine mode 1 args a --local_rank=0"
    expect_out "rank 1 local 1 world 2 path $shim:/mine mode 1 args a --local_rank=1"
    run "$tool" --as-deepspeed --no-local-rank -n 2 -- sh -c "$show" sh a
    expect_rc 0
    expect_out "rank 1 local 1 world 2 path $shim mode no-local-rank args a"
    expect_no_out "--local_rank"
    # One rank runs directly, with the same.
    run "$tool" --as-deepspeed -n 1 -- sh -c "$show" sh
    expect_rc 0
    expect_out "rank 0 local 0 world 1 path $shim mode 1 args --local_rank=0"
    # Without the flag none of it; --no-local-rank alone is a usage error.
    run "$tool" -n 1 -- sh -c "$show" sh
    expect_no_out "--local_rank"
    expect_no_out "mode 1"
    run "$tool" --no-local-rank -n 1 -- true
    expect_rc 2
    expect_err "--no-local-rank goes with --as-deepspeed"
    ;;

  run_failing_rank_ends_the_others)
    need_mpirun
    run "$tool" -n 3 -- sh -c 'if [ $OMPI_COMM_WORLD_RANK = 1 ]; then exit 7; fi; sleep 30'
    expect_rc 7
    # With a hostfile (here naming this host), each rank runs under zero-run's supervisor, and
    # zero-run names a failed rank and its host itself, and only it: the ranks mpirun then ends
    # are a teardown, not failures.
    printf '%s slots=4\n' "$(hostname)" >"$work/hosts"
    run "$tool" -n 3 --hostfile "$work/hosts" -- \
      sh -c 'if [ $OMPI_COMM_WORLD_RANK = 1 ]; then exit 7; fi; sleep 30'
    expect_rc 7
    expect_err "zero-run: rank 1 on $(hostname) (pid "
    expect_err ") exited with status 7; mpirun ends the other ranks"
    [ "$(grep -c '^zero-run: rank' "$work/err")" -eq 1 ] || fail "more than one rank named: $err"
    run "$tool" -n 2 --hostfile "$work/hosts" -- \
      sh -c 'if [ $OMPI_COMM_WORLD_RANK = 0 ]; then kill -KILL $$; fi; sleep 30'
    expect_rc 137
    expect_err "zero-run: rank 0 on $(hostname) (pid "
    expect_err ") was killed by signal 9 (Killed)"
    # A supervisor that cannot reach zero-run says so and runs its rank anyway.
    ZERO_RUN_REPORT_HOST=no-such-host.invalid run "$tool" -n 2 --hostfile "$work/hosts" -- \
      sh -c 'echo ran $OMPI_COMM_WORLD_RANK'
    expect_rc 0
    expect_out "ran 0"
    expect_out "ran 1"
    expect_err "cannot reach zero-run at no-such-host.invalid:"
    ;;

  run_one_rank_directly)
    # PATH without mpirun: one rank must not need it.
    mkdir "$work/path" && ln -s "$(command -v sh)" "$work/path/sh"
    PATH="$work/path" run "$tool" -n 1 -- sh -c 'echo omp $OMP_NUM_THREADS $ZERO_LAUNCHER; exit 5'
    expect_rc 5
    expect_out "omp $cpus zero-run"
    PATH="$work/path" run "$tool" -n 1 -- sh -c 'kill -KILL $$'
    expect_rc 137
    run "$tool" -n 1 -- "$work/no-such-program"
    expect_rc 127
    expect_err "cannot run '$work/no-such-program': No such file or directory"
    ;;

  signal_term_ends_all_ranks)
    need_mpirun
    "$tool" -n 2 -- sh -c "echo \$\$ >$work/rank.\$OMPI_COMM_WORLD_RANK; exec sleep 60" &
    zero_run=$!
    wait_for_files "$work/rank.0" "$work/rank.1"
    pgrep -P "$zero_run" >"$work/mpirun"
    kill -TERM "$zero_run"
    rc=0
    wait "$zero_run" || rc=$?
    # Open MPI's mpirun ends the job on SIGTERM and exits 1 (not 128+15).
    [ "$rc" -ne 0 ] || fail "exit status 0 after SIGTERM"
    echo "zero-run exited $rc after SIGTERM"
    expect_ended "$work/mpirun" "$work/rank.0" "$work/rank.1"
    ;;

  signal_term_ends_direct_command)
    "$tool" -n 1 -- sh -c "echo \$\$ >$work/pid; exec sleep 60" &
    zero_run=$!
    wait_for_files "$work/pid"
    kill -TERM "$zero_run"
    rc=0
    wait "$zero_run" || rc=$?
    [ "$rc" -eq 143 ] || fail "exit status $rc after SIGTERM, expected 128+15"
    expect_ended "$work/pid"
    ;;

  signal_usr1_forwarded)
    # The command survives SIGUSR1 only by its trap: exit 42 shows it was forwarded (zero-run
    # killed by SIGUSR1 itself would exit 138).
    "$tool" -n 1 -- sh -c "trap 'kill \$!; exit 42' USR1; echo \$\$ >$work/pid; sleep 60 & wait" &
    zero_run=$!
    wait_for_files "$work/pid"
    kill -USR1 "$zero_run"
    rc=0
    wait "$zero_run" || rc=$?
    [ "$rc" -eq 42 ] || fail "exit status $rc after SIGUSR1, expected the command's 42"
    if command -v mpirun >/dev/null; then
      "$tool" -n 2 -- sh -c "trap 'kill \$!; exit 42' USR1; echo \$\$ >$work/rank.\$OMPI_COMM_WORLD_RANK; sleep 60 & wait" &
      zero_run=$!
      wait_for_files "$work/rank.0" "$work/rank.1"
      kill -USR1 "$zero_run"
      rc=0
      wait "$zero_run" 2>/dev/null || rc=$?
      [ "$rc" -eq 42 ] || fail "exit status $rc after SIGUSR1 through mpirun, expected 42"
    fi
    ;;

  signal_ignored_stays_ignored)
    # As under nohup: SIGHUP ignored before zero-run starts is not forwarded, and the command
    # ignores it too; SIGTERM then still ends it.
    (
      trap '' HUP
      exec "$tool" -n 1 -- sh -c "echo \$\$ >$work/pid; exec sleep 60"
    ) &
    zero_run=$!
    wait_for_files "$work/pid"
    # Were SIGHUP not ignored by both, one of them would end by it (129) before the SIGTERM
    # (pending signals are delivered lowest number first).
    kill -HUP "$zero_run"
    kill -HUP "$(cat "$work/pid")"
    kill -TERM "$zero_run" 2>/dev/null || true
    rc=0
    wait "$zero_run" || rc=$?
    [ "$rc" -eq 143 ] || fail "exit status $rc, expected 128+15 from the SIGTERM (129: SIGHUP)"
    ;;

  *)
    fail "unknown case"
    ;;
esac
echo "ok: $case_name"
