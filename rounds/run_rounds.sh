#!/usr/bin/env bash
# Run interleaved rounds of two router configurations and judge them with `rounds`.
#
# Each round starts a fresh router per side with that side's start command, measures it with
# `router-latency run --wait-ready --out DIR/r<N>-<side>.json`, and stops it before the other
# side starts. Sides alternate and the start order rotates (round 1: base then new; round 2:
# new then base; ...), so drift on the node (heat, a neighbour's job) falls on both sides
# alike. The script ends with one `router-latency rounds` on stdout, the only one that writes
# GitHub's job summary (GITHUB_STEP_SUMMARY), --junit and --html; everything else it prints
# (each round, each sequential look) and the output of the start and stop commands goes to
# stderr.
#
# Before a side starts, nothing may answer at its URL (a router from an earlier round still
# running is refused); after its run, the router that answered must be the one its start
# command started (the listener's process on a loopback port, while the start command runs;
# and not the other side's configuration hash once the two differed).
#
# A start command may stay in the foreground (it is the router, as `simulate` is) or return
# once the router runs detached (`docker run -d`). Either way it runs in a session of its own
# with ROUND and SIDE in its environment; without --base-container/--new-container, each run
# reads that session's CPU time (run --router-session) for the router's CPU per request and
# the foreign CPU on its cores. A router known to have ended (every process the start command
# left in its session gone, or its --*-container not running) is not waited for: one that
# never answered stops the script (exit 2); one that ended while measured, seen during the
# run or once it ended, leaves an incomplete run, a failed side. A side is stopped by its stop
# command, when given, and then by SIGTERM to whatever still runs in that session (SIGKILL
# after --stop-wait seconds, 30 by default). A start command that returns leaving nothing in
# its session needs a stop command; one that exits with an error, before or during the run,
# stops the script, and that run's file is set aside as <file>.rejected. Every wait and the
# budget run on a monotonic clock (/proc/uptime), never the wall clock.
#
# The tool it runs: python3 (or $PYTHON) and the router_latency.py beside rounds/, or --tool.
# It looks at the started router, the run and a stopping side every 100 ms;
# RUN_ROUNDS_POLL_MS (a whole number of milliseconds, 1 to 1000) sets another interval
# (the tests poll every 20 ms; a --wait-ready for the URL file stays that many seconds).
# `pip install` puts the script into the bin/ folder of the router-latency command, as
# run_rounds.sh, and it then runs that command.
#
# Two simulated routers, from the repository's top folder (the worked example of README.md):
#
#   python3 router_latency.py demo --keep demo   # or: corpus --repo ../semantic-router ...
#   rounds/run_rounds.sh --rounds 3 --dir results --corpus demo/corpus.json \
#     --base cpu --base-url http://127.0.0.1:8801 \
#     --base-start 'python3 router_latency.py simulate --port 8801 --delay-ms 3 --serial' \
#     --new gpu --new-url http://127.0.0.1:8802 \
#     --new-start 'python3 router_latency.py simulate --port 8802 --delay-ms 1.5 --serial'
#
# Containers on a GPU node:
#
#   rounds/run_rounds.sh --rounds 5 --dir results --corpus corpus.json \
#     --base cpu --base-url http://127.0.0.1:8801 \
#     --base-start 'docker run -d --name "router-$SIDE" --cpuset-cpus 0-15 -p 8801:8080 rt:cpu' \
#     --base-stop 'docker rm -f "router-$SIDE"' \
#     --new rocm --new-url http://127.0.0.1:8802 \
#     --new-start 'docker run -d --name "router-$SIDE" --device /dev/kfd -p 8802:8080 rt:rocm' \
#     --new-stop 'docker rm -f "router-$SIDE"' \
#     -- --concurrency 1,4,16
#
# Before the first router starts, the script checks the corpus, the folder, the tool, the
# URLs and every option it passes on (`run --check`, and `rounds` on an empty folder).
# Everything after `--` goes to each `router-latency run`, with ROUND and SIDE in its
# environment, so a probe can name the side's container:
#   -- --probe cpuset='docker exec "router-$SIDE" cat /sys/fs/cgroup/cpuset.cpus.effective'
# Set DRIVER_CPUS (for example 30-31) to pin the driver with taskset to cores the routers do
# not use. Only the start and stop commands given are run; nothing else is evaluated.
#
# Exit code: that of the final `rounds` (0 pass, 1 regression, changed decision or failed
# side, 2 bad input, 3 inconclusive, also where --until-decided stopped for futility), but 1
# when a run had failed requests (or degraded
# answers, unless run's --allow-degraded) beyond its --max-errors and `rounds` passed or was
# inconclusive; 2 when the script could not run a
# round; 130 or 143 when interrupted (the incomplete file is named; --resume keeps the
# complete rounds). An interrupted run gets --stop-wait seconds to save what it measured.
set -euo pipefail
# a closed stdout or stderr (`run_rounds.sh ... 2>&1 | head -n 2`) must not end the script with
# SIGPIPE after round 1: its own writes fail quietly instead, and it finishes with its real
# code; the start and stop commands get the default back (default_pipe)
trap '' PIPE

here=${BASH_SOURCE[0]%/*}  # dirname's answer, without its process: . for a bare name, / at the top
if [ "$here" = "${BASH_SOURCE[0]}" ]; then here=.; elif [ -z "$here" ]; then here=/; fi
here=$(cd "$here" && pwd)
python=${PYTHON:-python3}
interval_ms() {  # sets $1 to environment variable $2's milliseconds, 1 to 1000, else $3
  local value=${!2:-$3}
  [[ "$value" =~ ^[1-9][0-9]{0,3}$ ]] && [ "$value" -le 1000 ] \
    || { echo "run_rounds.sh: error: $2 must be 1 to 1000, not '$value'" >&2; exit 2; }
  printf -v "$1" '%s' "$value"
}
interval_ms poll_ms RUN_ROUNDS_POLL_MS 100
printf -v poll '%d.%03d' $((poll_ms / 1000)) $((poll_ms % 1000))  # read -t's seconds: 0.100
# whether a side's router has ended, or listens on another port than its URL's, it looks
# once a second (the first port look a second after the start); RUN_ROUNDS_LOOK_MS (1 to
# 1000, docs/cli.md) sets another interval: the tests of the port look use 100
interval_ms look_ms RUN_ROUNDS_LOOK_MS 1000
# the repository's layout (rounds/ beside the tool), else the tool copied into this folder
tool="$here/../router_latency.py"
[ -e "$tool" ] || [ ! -e "$here/router_latency.py" ] || tool="$here/router_latency.py"
tool_given=0
rounds=5
rounds_given=0
until_decided=0
min_rounds=3
max_rounds=10
max_sequential=1000  # the most rounds of --until-decided (rl.MAX_SEQUENTIAL_ROUNDS)
budget_minutes=""   # --budget-minutes: no round starts that would end past it
requests_per_pass=""  # --requests-per-pass: run -n, enough sendings of the corpus for it
dir=""
corpus=""
wait_ready=300
stop_wait=30
dry_run=0
resume=0
instances=1   # --instances K: routers per side and round, started together (a pool)
together=0    # --together: both sides' pools up at once, their instances interleaved
gpus=""       # --gpus LIST|all: instance i on the i-th GPU of the list
concurrent=0  # --concurrent: a side's instances measured at once, one GPU each
declare -A name=([base]="" [new]="")
declare -A start_cmd=([base]="" [new]="")
declare -A stop_cmd=([base]="" [new]="")
declare -A url=([base]="" [new]="")
declare -A url_file=([base]="" [new]="")
declare -A metrics_url=([base]="" [new]="")
declare -A container=([base]="" [new]="")
rounds_args=(--tolerance 5)  # passed to `rounds`
format_args=()
final_args=()  # passed to the final `rounds` only: --junit, --html
run_args=()

# --- pools (--instances, --together, --gpus, --concurrent) ---
# With --instances 1 and neither --together nor --gpus (pooled=0) a round runs as it always
# did (measure_side); otherwise measure_pools runs it: each side's K routers started together,
# all waited for, each measured into r<N>-<side>@<i>.json, then all stopped.
pooled=0
declare -A pool_pid=()    # "role:i" -> the session of instance i's start command
declare -A pool_url=()    # "role:i" -> the URL instance i answers at
declare -A pool_ready=()  # "role:i" -> seconds from its start to ready (a fact it records)
declare -A pool_started=()  # "role:i" -> its place in the start order of the round
gpu_list=()               # --gpus: instance i on gpu_list[(i - 1) % its length]
at_once=1                 # --concurrent: instances measured at once, one per GPU
router_cpus=""            # --router-cpus after --: the cores split per instance

gpu_indexes() {  # every GPU nvidia-smi (or rocm-smi) lists, by index, one a line
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' '
  elif command -v rocm-smi >/dev/null; then
    rocm-smi --showid 2>/dev/null | sed -n 's/^GPU\[\([0-9]*\)\].*/\1/p' | sort -un
  fi
}

# the i-th share of a CPU list split into $2 parts (cores 0-15 in 4: 0-3, 4-7, ...), or
# nothing when the list has fewer CPUs than parts
cpu_share() {
  "$python" - "$@" <<'PY'
import signal  # a Ctrl-C ends a helper quietly: the script's own trap says what happened
signal.signal(signal.SIGINT, signal.SIG_DFL)
import sys
text, parts, i = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cpus = []
for item in text.split(","):
    low, _, high = item.partition("-")
    cpus += range(int(low), int(high or low) + 1)
if len(cpus) >= parts:
    size = len(cpus) // parts
    print(",".join(map(str, cpus[(i - 1) * size:i * size])))
PY
}

check_pool_options() {
  [[ "$instances" =~ ^[1-9][0-9]{0,2}$ ]] \
    || die "--instances must be a whole number from 1 to 999, got '$instances'"
  if [ "$instances" -gt 1 ] || [ "$together" -eq 1 ] || [ -n "$gpus" ]; then pooled=1; fi
  local role arg i count
  for ((i = 0; i < ${#run_args[@]}; i++)); do
    arg=${run_args[$i]}
    case "$arg" in
      --router-cpus=*) router_cpus=${arg#*=} ;;
      --router-cpus) router_cpus=${run_args[$((i + 1))]:-} ;;
    esac
  done
  if [ -n "$gpus" ]; then
    if [ "$gpus" = all ]; then
      mapfile -t gpu_list < <(gpu_indexes)
      [ ${#gpu_list[@]} -gt 0 ] || die "--gpus all: neither nvidia-smi nor rocm-smi lists a GPU"
    else
      [[ "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] \
        || die "--gpus takes a comma-separated list of GPU indexes (0,1,2) or all, got '$gpus'"
      IFS=, read -r -a gpu_list <<< "$gpus"
    fi
  fi
  if [ "$concurrent" -eq 1 ]; then
    [ ${#gpu_list[@]} -gt 0 ] || die "--concurrent measures a side's instances at once, $(
      )each on its own GPU: give --gpus LIST or all, or leave out --concurrent"
    at_once=$(( instances < ${#gpu_list[@]} ? instances : ${#gpu_list[@]} ))
    local cores
    cores=$( { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN; } )
    if [ -n "$router_cpus" ]; then
      cores=$(( cores - $("$python" -c 'import sys
print(sum(int(b or a) - int(a) + 1 for a, _, b in (p.partition("-") for p in sys.argv[1].split(","))))' \
        "$router_cpus") ))
    fi
    # (a dry run may print the schedule of a larger node)
    [ "$cores" -ge "$at_once" ] || [ "$dry_run" -eq 1 ] || die "--concurrent runs $at_once $(
      )drivers at once, but only $cores cores are free of the routers (--router-cpus): at $(
      )most $cores fit"
  fi
  if [ "$instances" -gt 1 ]; then
    for role in base new; do
      if [[ "${url[$role]}" == *,* ]]; then
        IFS=, read -r -a urls <<< "${url[$role]}"
        count=${#urls[@]}
        [ "$count" -eq "$instances" ] \
          || die "--$role-url lists $count URLs for $instances instances"
        url[$role]=${urls[0]}; url_list[$role]=${urls[*]}
      elif [ -n "${url[$role]}" ]; then
        [[ "${url[$role]}" =~ ^https?://([^/]*\]|[^/:]*):[0-9]+(/.*)?$ ]] || die "--$role-url $(
          )needs a port with --instances (instance i answers at the port plus i - 1), or a $(
          )comma-separated list of $instances URLs"
      elif [[ "${url_file[$role]}" != *%i* ]]; then
        die "--$role-url-file needs %i in its name with --instances (each instance's file)"
      fi
    done
  fi
}
declare -A url_list=([base]="" [new]="")

instance_url() {  # sets target: instance $2 of role $1's URL (empty: from its URL file)
  local role=$1 i=$2 rest hostport path="" port
  if [ -n "${url_list[$role]}" ]; then
    read -r -a urls <<< "${url_list[$role]}"; target=${urls[$((i - 1))]}; return
  fi
  target=${url[$role]}
  if [ -z "$target" ] || [ "$i" -eq 1 ]; then return; fi
  rest=${target#*://}; hostport=${rest%%/*}
  if [[ "$rest" == */* ]]; then path=/${rest#*/}; fi
  port=${hostport##*:}
  target="${target%%://*}://${hostport%:*}:$((10#$port + i - 1))$path"
}

port_of() {  # sets port_of: the port of URL $1, its own, else its scheme's (80 or 443)
  local address=${1#*://} port
  address=${address%%/*}; port=${address##*]}
  if [[ "$port" == *:* ]]; then port_of=${port##*:}
  elif [[ "$1" == https:* ]]; then port_of=443; else port_of=80; fi
}

# what --dry-run prints for pools
schedule_look() {  # --dry-run: the sequential look after round $1, where the design takes one
  if looks_after "$1"; then
    printf 'look %d: %s rounds --dir %s --base %s --new %s %s --sequential %d: %s\n' \
      "$1" "${driver[*]}" "$dir" "${name[base]}" "${name[new]}" "${rounds_args[*]}" "$rounds" \
      "stop unless it exits 3 (undecided) without a 'stop: futility:' line"
  fi
}
schedule_then() {  # --dry-run: the final judgement
  printf 'then: %s rounds --dir %s --base %s --new %s %s%s\n' "${driver[*]}" "$dir" \
    "${name[base]}" "${name[new]}" "${rounds_args[*]} --corpus $corpus$(
    )${final_args[*]:+ ${final_args[*]}}${format_args[*]:+ ${format_args[*]}}" \
    "$( [ "$until_decided" -eq 1 ] && printf ' --sequential %d' "$rounds")"
}

pool_schedule() {
  local i role side gpu
  # each instance's URL and port, the same every round: looked up once, not K x rounds times
  # (a dry run of a plan prints tens of thousands of lines)
  local -A shown_url=() shown_port=()
  for role in base new; do
    for ((i = 1; i <= instances; i++)); do
      instance_url "$role" "$i"; port_of=""
      if [ -n "$target" ]; then port_of "$target"; fi  # no subshell
      shown_url[$role:$i]=$target; shown_port[$role:$i]=$port_of
    done
  done
  for ((r = 1; r <= rounds; r++)); do
    order_of "$r"; for role in $order; do
      for ((i = 1; i <= instances; i++)); do
        side=${name[$role]}; port_of=${shown_port[$role:$i]}; gpu=""
        if [ ${#gpu_list[@]} -gt 0 ]; then
          gpu=" GPU=${gpu_list[$(( (i - 1) % ${#gpu_list[@]} ))]}"
        fi
        printf 'round %d %s@%d: start: INSTANCE=%d PORT=%s%s %s\n' "$r" "$side" "$i" "$i" \
          "$port_of" "$gpu" "${start_cmd[$role]}"
      done
      [ "$together" -eq 1 ] || pool_schedule_runs "$role"
    done
    if [ "$together" -eq 1 ]; then pool_schedule_runs; fi
    order_of "$r"; for role in $order; do
      printf 'round %d %s: stop its %d instances\n' "$r" "${name[$role]}" "$instances"
    done
    schedule_look "$r"
  done
  schedule_then
}
pool_schedule_runs() {  # $1: one role, or none for both sides interleaved
  local item role i at_once=""
  if [ "$concurrent" -eq 1 ]; then at_once=" (at once with the side's others)"; fi
  measure_order "$r" "${1:-}"
  for item in $measured; do
    role=${item%:*}; i=${item#*:}
    target=${shown_url[$role:$i]}  # pool_schedule's
    printf 'round %d %s@%d: run: --url %s --out %s%s\n' "$r" "${name[$role]}" "$i" \
      "${target:-<from ${url_file[$role]//%i/$i}>}" "$dir/r$r-${name[$role]}@$i.json" \
      "$at_once"
  done
}

# sets measured: the order instances are measured in, "role:i" words: one role's 1..K, or
# with --together both sides balanced in pairs, the round's first side first in odd pairs
# (a1 b1 b2 a2 ...); a variable, not printed into $( ): a fork a side and round costs more
# than the round's lines of a dry run of thousands of rounds
measure_order() {
  local first second i
  measured=""
  if [ -n "${2:-}" ]; then
    for ((i = 1; i <= instances; i++)); do measured+="$2:$i "; done; return
  fi
  order_of "$1"; read -r first second <<< "$order"
  for ((i = 1; i <= instances; i++)); do
    if [ $((i % 2)) -eq 1 ]; then measured+="$first:$i $second:$i "
    else measured+="$second:$i $first:$i "; fi
  done
}

start_instance() {  # start instance $2 of role $1 in a session of its own
  local role=$1 i=$2 side=${name[$1]} gpu="" port=""
  if [ ${#gpu_list[@]} -gt 0 ]; then gpu=${gpu_list[$(( ($2 - 1) % ${#gpu_list[@]} ))]}; fi
  instance_url "$role" "$i"
  if [ -n "$target" ]; then
    port_of "$target"; port=$port_of
    if net answers "$target"; then
      die "a pool of $instances does not fit: port $port already answers ($target, $side's $(
        )instance $i) before it starts (round $r); give ports that are free"
    fi
  else
    rm -f -- "${url_file[$role]//%i/$i}"
  fi
  (
    export ROUND=$r SIDE=$side INSTANCE=$i INSTANCES=$instances PORT=$port
    if [ -n "$gpu" ]; then
      export GPU=$gpu CUDA_VISIBLE_DEVICES=$gpu HIP_VISIBLE_DEVICES=$gpu ROCR_VISIBLE_DEVICES=$gpu
    fi
    default_pipe setsid bash -c -- "${start_cmd[$role]}"
  ) </dev/null >&2 {nap_fd}<&- {err_fd}>&- &
  pool_pid[$role:$i]=$!
  pool_url[$role:$i]=$target
  started_count=$((started_count + 1))
  pool_started[$role:$i]=$started_count
  now_ms; pool_since[$role:$i]=$now  # the monotonic clock, as every wait
}
declare -A pool_since=()

# wait until every started instance of the roles answers ready (GET /ready 200, or any
# answer where the router has no /ready), at most --wait-ready seconds: one look a poll asks
# every instance not yet ready at once (one process, not one an instance), then the CPUs
# where each instance's threads ran, all in one look
wait_pool_ready() {
  local key role i waiting code urls keys answered
  local deadline
  now_ms; deadline=$((now + wait_ready * 1000))
  while now_ms && [ "$now" -le "$deadline" ]; do
    urls=(); keys=()
    for key in "${!pool_pid[@]}"; do
      role=${key%:*}; i=${key#*:}
      [ -z "${pool_ready[$key]:-}" ] || continue
      if [ -z "${pool_url[$key]}" ]; then
        local file=${url_file[$role]//%i/$i}
        if [ -s "$file" ]; then first_line "pool_url[$key]" "$file"; fi
      fi
      if [ -n "${pool_url[$key]}" ]; then urls+=("${pool_url[$key]}"); keys+=("$key"); fi
    done
    answered=" "
    if [ ${#urls[@]} -gt 0 ]; then answered=$(net ready "${urls[@]}"); fi
    answered=" ${answered//$'\n'/ } "
    now_ms
    for ((i = 0; i < ${#keys[@]}; i++)); do
      if [[ "$answered" == *" $i "* ]]; then
        pool_ready[${keys[$i]}]=$((now - ${pool_since[${keys[$i]}]}))
      fi
    done
    waiting=0
    for key in "${!pool_pid[@]}"; do
      [ -z "${pool_ready[$key]:-}" ] || continue
      role=${key%:*}; i=${key#*:}
      if ! running "${pool_pid[$key]}"; then
        code=0; wait "${pool_pid[$key]}" 2>/dev/null || code=$?
        if [ "$code" -ne 0 ]; then
          die "start command of ${name[$role]} instance $i exited $code (round $r)"
        fi
        session_alive "${pool_pid[$key]}" || [ -n "${stop_cmd[$role]}" ] \
          || die "start command of ${name[$role]} instance $i returned, leaving nothing $(
            )running, and there is no --$role-stop (round $r)"
      fi
      waiting=1
    done
    if [ "$waiting" -eq 0 ]; then pool_threads; return 0; fi
    nap
  done
  die "a pool of $instances: not every instance answered ready within $wait_ready s (round $r)"
}

pool_threads() {  # sets pool_cpus: where each instance's threads ran, "CPUS NODES", one look
  local key sessions=() line session
  declare -gA pool_cpus=()
  for key in "${!pool_pid[@]}"; do sessions+=("${pool_pid[$key]}"); done
  declare -A seen=()
  while read -r session line; do seen[$session]=$line; done \
    < <(thread_cpus "${sessions[@]}")
  for key in "${!pool_pid[@]}"; do pool_cpus[$key]=${seen[${pool_pid[$key]}]:-}; done
}

instance_args() {  # sets instance_args: run's --instance items of instance $2 of role $1
  local role=$1 i=$2 key=$1:$2 share="" cpus ready
  printf -v ready '%d.%03d' $((pool_ready[$key] / 1000)) $((pool_ready[$key] % 1000))
  instance_args=(--instance "round=$r" --instance "side=${name[$role]}" --instance "number=$i"
                 --instance "count=$instances" --instance "start_order=${pool_started[$key]}"
                 --instance "ready_s=$ready")
  port_of "${pool_url[$key]}"
  instance_args+=(--instance "port=$port_of")
  if [ ${#gpu_list[@]} -gt 0 ]; then
    local gpu=${gpu_list[$(( (i - 1) % ${#gpu_list[@]} ))]}
    instance_args+=(--instance "gpu=$gpu")
    instance_facts "$gpu"
  fi
  if [ -n "$router_cpus" ]; then
    share=$(cpu_share "$router_cpus" "$instances" "$i")
    if [ -n "$share" ]; then instance_args+=(--instance "cores=$share"); fi
  fi
  # where its threads ran: the CPUs of the threads of its start command's session, and
  # their NUMA nodes
  local nodes
  read -r cpus nodes <<< "${pool_cpus[$key]:-}"
  if [ -n "$cpus" ]; then instance_args+=(--instance "thread_cpus=$cpus"); fi
  if [ -n "$nodes" ]; then instance_args+=(--instance "numa_nodes=$nodes"); fi
}

# the CPUs the threads of each session given last ran on (/proc/*/task/*/stat field 39), and
# their NUMA nodes (/sys/devices/system/node): "SESSION CPUS NODES" a line, lists by commas
thread_cpus() {
  "$python" - "$@" <<'PY'
import signal  # a Ctrl-C ends a helper quietly: the script's own trap says what happened
signal.signal(signal.SIGINT, signal.SIG_DFL)
import os, sys
sessions = {session: set() for session in sys.argv[1:]}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        cpus = sessions.get(stat[stat.rindex(")") + 2:].split()[3])
        if cpus is None:
            continue
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as handle:
                fields = handle.read()
            cpus.add(int(fields[fields.rindex(")") + 2:].split()[36]))
    except (OSError, ValueError, IndexError):
        continue
node_cpus = {}
for node in os.listdir("/sys/devices/system/node") if os.path.isdir(
        "/sys/devices/system/node") else ():
    if node.startswith("node") and node[4:].isdigit():
        try:
            with open(f"/sys/devices/system/node/{node}/cpulist") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        for item in filter(None, text.split(",")):
            low, _, high = item.partition("-")
            node_cpus.setdefault(int(node[4:]), set()).update(range(int(low), int(high or low) + 1))
for session, cpus in sessions.items():
    nodes = sorted(n for n, held in node_cpus.items() if cpus & held)
    print(session, ",".join(map(str, sorted(cpus))), ",".join(map(str, nodes)))
PY
}

instance_facts() {  # adds the GPU's facts at start (nvidia-smi): bus id, SM clock, memory used
  local line bus sm used
  command -v nvidia-smi >/dev/null || return 0
  line=$(nvidia-smi -i "$1" --query-gpu=pci.bus_id,clocks.sm,memory.used \
    --format=csv,noheader,nounits 2>/dev/null | head -n 1) || return 0
  IFS=', ' read -r bus sm used <<< "$line"
  if [ -n "$bus" ]; then instance_args+=(--instance "gpu_bus_id=$bus"); fi
  if [[ "$sm" =~ ^[0-9]+$ ]]; then instance_args+=(--instance "gpu_sm_clock_mhz=$sm"); fi
  if [[ "$used" =~ ^[0-9]+$ ]]; then instance_args+=(--instance "gpu_used_mib=$used"); fi
}

measure_instance() {  # measure instance $2 of role $1 in the background; sets run_pid
  local role=$1 i=$2 side=${name[$1]} key=$1:$2 share="" runner=("${driver[@]}")
  local file="$dir/r$r-$side@$i.json"
  instance_args "$role" "$i"
  if [ "$concurrent" -eq 1 ] && [ -n "${DRIVER_CPUS:-}" ]; then
    share=$(cpu_share "$DRIVER_CPUS" "$at_once" "$(( (i - 1) % at_once + 1 ))")
    if [ -n "$share" ]; then runner=(taskset -c "$share" "${tool_run[@]}"); fi
  fi
  side_args=()
  if [ -n "${metrics_url[$role]}" ]; then side_args=(--metrics-url "${metrics_url[$role]}"); fi
  if ! router_given; then side_args+=(--router-session "${pool_pid[$key]}"); fi
  measuring=$file
  ROUND=$r SIDE=$side INSTANCE=$i "${runner[@]}" run --url "${pool_url[$key]}" \
    --corpus "$corpus" --out "$file" --label "$side" --wait-ready "$wait_ready" --quiet \
    "${instance_args[@]}" ${side_args[@]+"${side_args[@]}"} ${run_args[@]+"${run_args[@]}"} \
    {nap_fd}<&- {err_fd}>&- &
  run_pid=$!
  pool_run[$key]=$run_pid
}
declare -A pool_run=()

finish_instance() {  # wait for instance $2 of role $1's run; its line waits for the pool's
  local role=$1 i=$2 side=${name[$1]} code=0 file="$dir/r$r-${name[$1]}@$2.json"
  wait "${pool_run[$role:$i]}" || code=$?
  measuring=""
  case "$code" in
    0|1) pool_said+=("$side@$i:$code:$file") ;;
    130|143) interrupted=$code; exit "$code" ;;
    *) say_pool; die "round $r $side@$i: run exited $code" ;;
  esac
}
pool_said=()  # "side@i:code:file" of the instances measured, said by say_pool
say_pool() {  # say how each instance measured went, read in one look (one process a pool)
  local item files=() lines=() k=0 code
  [ ${#pool_said[@]} -gt 0 ] || return 0
  for item in "${pool_said[@]}"; do files+=("${item#*:*:}"); done
  mapfile -t lines < <(run_file summary "${files[@]}" || true)
  for item in "${pool_said[@]}"; do
    code=${item#*:}; code=${code%%:*}
    if [ "$code" -eq 1 ]; then
      failed_runs+=("r$r ${item%%:*}")
      say "round $r/$rounds ${item%%:*}: ${lines[$k]:-unreadable}; more failed requests $(
        )(degraded answers included) than --max-errors allows"
    else
      say "round $r/$rounds ${item%%:*}: ${lines[$k]:-unreadable}"
    fi
    k=$((k + 1))
  done
  pool_said=()
}

# stop every started instance: each one's stop command (with INSTANCE and PORT too), then
# SIGTERM to every session at once, and one wait for them all (SIGKILL after --stop-wait s)
stop_pools() {
  local key role deadline alive
  for key in "${!pool_pid[@]}"; do
    role=${key%:*}
    if [ -n "${stop_cmd[$role]}" ]; then
      (port_of "${pool_url[$key]:-http://x/}"
       ROUND=$r SIDE=${name[$role]} INSTANCE=${key#*:} PORT=$port_of default_pipe bash -c -- \
         "${stop_cmd[$role]}") \
        </dev/null >&2 {nap_fd}<&- {err_fd}>&- \
        || say "warning: stop command of ${name[$role]} instance ${key#*:} failed"
    fi
  done
  for key in "${!pool_pid[@]}"; do kill -TERM -- "-${pool_pid[$key]}" 2>/dev/null || true; done
  now_ms; deadline=$((now + stop_wait * 1000))
  while sessions_alive "${pool_pid[@]}" && [ -n "$alive" ] && now_ms \
      && [ "$now" -lt "$deadline" ]; do
    nap
  done
  for key in "${!pool_pid[@]}"; do
    if [[ " $alive " == *" ${pool_pid[$key]} "* ]]; then
      say "warning: ${name[${key%:*}]} instance ${key#*:} still ran $stop_wait s after $(
        )SIGTERM; sent SIGKILL"
      kill -KILL -- "-${pool_pid[$key]}" 2>/dev/null || true
    fi
  done
  for key in "${!pool_pid[@]}"; do wait "${pool_pid[$key]}" 2>/dev/null || true; done
  pool_pid=(); pool_url=(); pool_ready=(); pool_started=(); pool_since=(); pool_run=()
}

sessions_alive() {  # sets alive: those of the sessions given in which a process other than
  # a zombie is left, in one look through /proc: each session's leader first (one read each),
  # then every process, until each session is found
  local stat rest state session found=" " left=$# leaders=()
  for session; do leaders+=("/proc/$session/stat"); done
  for stat in ${leaders[@]+"${leaders[@]}"} /proc/[0-9]*/stat; do
    { read -r rest < "$stat"; } 2>/dev/null || continue
    stat_fields
    if [ "$state" != Z ] && [[ " $* " == *" ${session:-x} "* ]] \
        && [[ "$found" != *" $session "* ]]; then
      found+="$session "; left=$((left - 1))
      [ "$left" -gt 0 ] || break
    fi
  done
  found=${found# }; alive=${found% }
}

# sets state and session from the /proc/PID/stat line in rest (which it shortens): its fields
# after the command's name, which ends at the last ") " (a name may hold ") " itself), in
# parameter expansions: ${rest##*) } and a here-string into an array took three times the
# CPU of the read, a look through /proc every poll while a side stops
stat_fields() {
  rest=${rest#*) }
  while [[ "$rest" == *") "* ]]; do rest=${rest#*) }; done
  state=${rest%% *}; rest=${rest#* }; rest=${rest#* }; rest=${rest#* }; session=${rest%% *}
}

gpu_free_mib() {  # prints GPU $1's free memory in MiB (nvidia-smi); nothing where unknown
  command -v nvidia-smi >/dev/null || return 0
  { nvidia-smi -i "$1" --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null \
    | head -n 1 | tr -d ' '; } || true
}

# before the first pool: start its first instance alone, and refuse the pool when its GPU's
# free memory before the start cannot hold as many instances as the pool puts on one GPU
pool_fits() {
  local role=$1 gpu=${gpu_list[0]:-0} before after per_gpu fit
  checked_fit=1
  before=$(gpu_free_mib "$gpu")
  start_instance "$role" 1
  [[ "$before" =~ ^[0-9]+$ ]] || return 0
  wait_pool_ready
  after=$(gpu_free_mib "$gpu")
  [[ "$after" =~ ^[0-9]+$ ]] && [ "$after" -lt "$before" ] || return 0
  local gpus=$(( ${#gpu_list[@]} > 0 ? ${#gpu_list[@]} : 1 ))
  per_gpu=$(( (instances + gpus - 1) / gpus ))
  if [ "$together" -eq 1 ]; then per_gpu=$((per_gpu * 2)); fi
  fit=$(( before / (before - after) ))
  [ "$per_gpu" -le "$fit" ] || die "a pool of $instances does not fit: its first instance $(
    )took $((before - after)) MiB of GPU $gpu, which had $before MiB free before it started: $(
    )at most $fit instances a GPU, and the pool puts $per_gpu on one$(
    [ "$together" -eq 1 ] && echo ' (both sides, --together)')"
}
checked_fit=0

measure_pools() {  # round $r of pools: start, wait until all are ready, measure, stop
  local role item first=1
  started_count=0
  if [ "$checked_fit" -eq 0 ]; then
    order_of "$r"; role=${order%% *}
    pool_fits "$role"
    first=2
  fi
  if [ "$together" -eq 1 ]; then
    say "round $r/$rounds: starting both pools of $instances"
    order_of "$r"; for role in $order; do
      for ((i = first; i <= instances; i++)); do start_instance "$role" "$i"; done
      first=1
    done
    wait_pool_ready
    measure_order "$r"
    for item in $measured; do
      measure_instance "${item%:*}" "${item#*:}"; finish_instance "${item%:*}" "${item#*:}"
    done
    say_pool; stop_pools
    return
  fi
  order_of "$r"; for role in $order; do
    say "round $r/$rounds ${name[$role]}: starting a pool of $instances"
    for ((i = first; i <= instances; i++)); do start_instance "$role" "$i"; done
    first=1
    wait_pool_ready
    if [ "$concurrent" -eq 1 ]; then  # in waves of one instance per GPU
      local wave last
      for ((wave = 1; wave <= instances; wave += at_once)); do
        last=$(( wave + at_once - 1 < instances ? wave + at_once - 1 : instances ))
        for ((i = wave; i <= last; i++)); do measure_instance "$role" "$i"; done
        for ((i = wave; i <= last; i++)); do finish_instance "$role" "$i"; done
      done
    else
      for ((i = 1; i <= instances; i++)); do
        measure_instance "$role" "$i"; finish_instance "$role" "$i"
      done
    fi
    say_pool; stop_pools
  done
}

usage() { ( trap - PIPE; help_text ) || true; }  # | head: no SIGPIPE status
help_text() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  cat <<'EOT'

Options:
  --rounds N              rounds to run (default 5, at least 3)
  --until-decided         stop as soon as the result is decided: after each round from
                          --min-rounds on, `rounds --sequential MAX` judges a look of a
                          group-sequential plan (exit 0 pass, 1 fail: stop; 3: go on,
                          unless the look stops for futility: the rounds left cannot
                          decide it, exit 3); a last look still undecided exits 3
  --min-rounds N          the first look (default 3)
  --max-rounds M          the most rounds, the plan's last look (default 10, at most 1000;
                          beyond 40, 40 looks spread evenly)
  --budget-minutes K      node time: after the third round, start no round that the rounds
                          so far say would end more than K minutes after the first router
                          started (the rounds run are judged; `rounds --plan` says how many
                          minutes a plan takes)
  --requests-per-pass M   each pass sends the corpus ceil(M / prompts) times (run -n), as
                          `rounds --plan` proposes; not with -n or -d after --
  --dir DIR               folder for r<N>-<side>.json (created; must hold no round files)
  --resume                keep the complete rounds already in DIR and redo the others (their
                          files are renamed to <file>.replaced); with --instances, a round
                          is kept only with every instance of both sides complete, else
                          redone whole
  --corpus FILE           corpus file from `router-latency corpus`
  --base NAME, --new NAME side names (letters, digits, '.', '_', '-')
  --base-start CMD, --new-start CMD   start one side's router (foreground or detached)
  --base-stop CMD, --new-stop CMD     stop it (also run when the script fails); optional when
                          the start command stays in the foreground
  --base-url URL, --new-url URL       where the side answers
  --base-url-file F, --new-url-file F read the URL from F once the side started
  --base-metrics-url U, --new-metrics-url U  scrape the side's Prometheus metrics around
                          each pass (run --metrics-url)
  --base-container NAME, --new-container NAME  the side's Docker container: its CPU time per
                          request and the foreign vCPUs on its CPUs (run --router-container)
  --wait-ready SECONDS    how long a started router may take to answer (default 300); its
                          /ready 503 and a preview's 503 CLASSIFIER_UNAVAILABLE are not yet
  --stop-wait SECONDS     how long a side's router, and an interrupted run, may take to end
                          after SIGTERM before SIGKILL (default 30)
  --tolerance PCT         passed to `rounds` (default 5)
  --gate LIST, --max-mde PCT, --strict, --pass-unless-worse, --format FMT
                          passed to `rounds`
  --junit FILE, --html FILE   passed to the final `rounds`: JUnit XML and the report page
                          (the corpus goes with them, for the texts of the slower inputs)
  --tool PATH             router_latency.py to use (default: the one beside rounds/, else
                          one in this script's folder; where pip installed this script, the
                          router-latency command beside it)
  --instances K           start K routers per side and round together (a pool), wait until
                          all answer ready, measure each (r<N>-<side>@<i>.json), then stop
                          them; each start command gets INSTANCE (1 to K), INSTANCES and
                          PORT (and GPU where placed) beside ROUND and SIDE. Instance i
                          answers at the side's URL with its port plus i - 1, or at the
                          i-th of a comma-separated list of K URLs; a --*-url-file names
                          each instance's file with %i. Start-up is paid once per pool
  --together              both sides' pools up at once (where memory allows): one start-up
                          a round, instances measured interleaved (a1 b1 b2 a2 a3 b3 ...)
  --gpus LIST|all         place instance i on the i-th GPU of LIST (or of every GPU that
                          nvidia-smi or rocm-smi lists; past its end, round again from the
                          first): its start command sees GPU and
                          CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES;
                          with --router-cpus LIST after --, each instance gets its share
  --concurrent            measure a side's instances at once, one per GPU (in waves where
                          there are more instances than GPUs), each by its own driver (on its
                          share of DRIVER_CPUS): needs --gpus, and as many free cores as
                          instances measured at once
  --dry-run               print the schedule, run and check nothing
  -- ARGS                 extra arguments for every `router-latency run`
EOT
}

# how the tool is run: python3 (or $PYTHON) and the router_latency.py beside rounds/, or --tool;
# where pip installed this script (into the bin/ folder of the router-latency command, with no
# router_latency.py in the folder above), that command beside it
tool_command() {
  if [ "$tool_given" -eq 0 ] && [ ! -e "$tool" ] && [ -x "$here/router-latency" ]; then
    tool_run=("$here/router-latency")
  else
    tool_run=("$python" "$tool")
  fi
}

made_dir=0  # the script made --dir: an error leaves no empty folder behind
tool_unchecked=0  # 1 from the checks before the first router on, until a run --check passed
die() {
  if [ "$tool_unchecked" -eq 1 ]; then tool_unchecked=0; check_tool; fi
  printf 'run_rounds.sh: error: %s\n' "$1" >&2 2>/dev/null || true
  if [ "$made_dir" -eq 1 ]; then rmdir -- "$dir" 2>/dev/null || true; fi
  exit 2
}
# now_ms sets now to milliseconds on a monotonic clock, for every deadline and the budget: the
# wall clock ($EPOCHREALTIME, $SECONDS) jumps when NTP steps it (on a fresh node, 2 h forward
# after round 1 stopped a 30-minute budget after 5 s). /proc/uptime counts from boot
# (CLOCK_BOOTTIME), which a step leaves alone; without it, Python's time.monotonic()
now_ms() {
  local up rest
  if { read -r up rest < /proc/uptime; } 2>/dev/null && [[ "$up" =~ ^[0-9]+\.[0-9]{2}$ ]]; then
    now=$(( 10#${up/./} * 10 ))
  else
    now=$("$python" -c 'import time; print(time.monotonic_ns() // 1000000)')
  fi
}
first_line() { IFS= read -r "$1" < "$2" || true; }  # sets $1 to file $2's first line (head -n 1)
say() { printf 'run_rounds.sh: %s\n' "$1" >&2 2>/dev/null || true; }
default_pipe() { trap - PIPE; exec "$@"; }  # run a command with SIGPIPE's default action
unknown_option() {  # an option of `run` given before --, or one nobody knows
  local option=${1%%=*} shown=$1
  if [ "$option" = "$1" ] && [ -n "${2:-}" ] && [[ "$2" != -* ]]; then shown="$1 $2"; fi
  tool_command
  if "${tool_run[@]}" run --help 2>/dev/null | grep -qE -- "(^|[ ,])$option([ ,=]|\$)"; then
    die "$option is an option of \`router-latency run\`: run options come after --, $(
      )at the end (... -- $shown)"
  fi
  die "unknown option $1 (see --help)"
}
# whole OPTION VAR: VAR holds a whole number of at most 9 digits (leading zeros aside), and is
# set back in plain decimal: bash's tests and arithmetic fail or wrap past 2^63 (a 20-digit
# --budget-minutes said "integer expression expected", then "must be more than 0"), and its
# arithmetic reads 08 as octal
whole() {
  local value=${!2}
  [[ "$value" =~ ^[0-9]+$ ]] || die "$1 must be a whole number, got '$value'"
  value=${value#"${value%%[!0]*}"}
  [ "${#value}" -le 9 ] || die "$1 must be at most 999999999, got '${!2}'"
  printf -v "$2" '%d' "$((10#${value:-0}))"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=${2?}; rounds_given=1; shift 2 ;;
    --until-decided) until_decided=1; shift ;;
    --min-rounds) min_rounds=${2?}; shift 2 ;;
    --max-rounds) max_rounds=${2?}; shift 2 ;;
    --budget-minutes) budget_minutes=${2?}; shift 2 ;;
    --requests-per-pass) requests_per_pass=${2?}; shift 2 ;;
    --dir) dir=${2?}; shift 2 ;;
    --resume) resume=1; shift ;;
    --corpus) corpus=${2?}; shift 2 ;;
    --base|--new) name[${1#--}]=${2?}; shift 2 ;;
    --base-start|--new-start) side=${1#--}; start_cmd[${side%-start}]=${2?}; shift 2 ;;
    --base-stop|--new-stop) side=${1#--}; stop_cmd[${side%-stop}]=${2?}; shift 2 ;;
    --base-url|--new-url) side=${1#--}; url[${side%-url}]=${2?}; shift 2 ;;
    --base-url-file|--new-url-file) side=${1#--}; url_file[${side%-url-file}]=${2?}; shift 2 ;;
    --base-metrics-url|--new-metrics-url)
      side=${1#--}; metrics_url[${side%-metrics-url}]=${2?}; shift 2 ;;
    --base-container|--new-container)
      side=${1#--}; container[${side%-container}]=${2?}; shift 2 ;;
    --wait-ready) wait_ready=${2?}; shift 2 ;;
    --stop-wait) stop_wait=${2?}; shift 2 ;;
    --tolerance) rounds_args[1]=${2?}; shift 2 ;;
    --gate|--max-mde) rounds_args+=("$1" "${2?}"); shift 2 ;;
    --strict) rounds_args+=(--strict); shift ;;
    --pass-unless-worse) rounds_args+=(--pass-unless-worse); shift ;;
    --format) format_args=(--format "${2?}"); shift 2 ;;
    --junit|--html) final_args+=("$1" "${2?}"); shift 2 ;;
    --tool) tool=${2?}; tool_given=1; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --instances) instances=${2?}; shift 2 ;;
    --together) together=1; shift ;;
    --gpus) gpus=${2?}; shift 2 ;;
    --concurrent) concurrent=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; run_args=("$@"); break ;;
    -*) unknown_option "$@" ;;
    *) die "unexpected argument $1 (see --help)" ;;
  esac
done

# the python that runs the tool and this script's helpers: 3.9 or newer, said in one line
found=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])
sys.exit(sys.version_info < (3, 9))' 2>/dev/null) \
  || die "$( [ -n "$found" ] && printf '%s is Python %s, the tool needs 3.9 or newer' \
    "$python" "$found" || printf 'cannot run %s (PYTHON)' "$python"): set PYTHON to a $(
    )python3.9 or newer (PYTHON=python3.11 run_rounds.sh ...)"

# --- the options, on their own ---
whole --rounds rounds; whole --min-rounds min_rounds; whole --max-rounds max_rounds
whole --wait-ready wait_ready; whole --stop-wait stop_wait
if [ "$until_decided" -eq 1 ]; then
  [ "$rounds_given" -eq 0 ] \
    || die "--until-decided takes --min-rounds and --max-rounds, not --rounds"
  [ "$min_rounds" -ge 3 ] || die "--min-rounds must be at least 3"
  [ "$max_rounds" -ge "$min_rounds" ] || die "--max-rounds must be at least --min-rounds"
  [ "$max_rounds" -le "$max_sequential" ] || die "--max-rounds must be at most $max_sequential $(
    )(the most rounds a sequential plan runs, and rounds --plan proposes), got $max_rounds"
  rounds=$max_rounds
else
  [ "$rounds" -ge 3 ] || die "--rounds must be a whole number >= 3"
fi
[ -n "$dir" ] || die "--dir is required"
[ -n "$corpus" ] || die "--corpus is required"
budget_ms=""
if [ -n "$budget_minutes" ]; then
  [[ "$budget_minutes" =~ ^[0-9]*\.?[0-9]+$ ]] \
    || die "--budget-minutes must be a number of minutes, got '$budget_minutes'"
  # in Python, as a number of any length: 10^7 minutes (19 years) and more is refused, so
  # that the milliseconds stay far within bash's 64 bits
  budget_ms=$("$python" -c 'import sys; minutes = float(sys.argv[1])
print(round(minutes * 60000) if minutes < 1e7 else "large")' "$budget_minutes") \
    || die "--budget-minutes: cannot read '$budget_minutes' as a number"
  [ "$budget_ms" != large ] || die "--budget-minutes must be less than 10000000, $(
    )got '$budget_minutes'"
  [ "$budget_ms" -gt 0 ] || die "--budget-minutes must be more than 0"
fi
if [ -n "$requests_per_pass" ]; then
  whole --requests-per-pass requests_per_pass
  [ "$requests_per_pass" -ge 1 ] || die "--requests-per-pass must be at least 1"
  for arg in ${run_args[@]+"${run_args[@]}"}; do
    case "$arg" in
      -n*|--repeat|--repeat=*|-d*|--duration|--duration=*)
        die "--requests-per-pass sets run -n: give no ${arg%%=*} after --" ;;
    esac
  done
  [ -f "$corpus" ] && [ -r "$corpus" ] || die "cannot read the corpus file ($corpus)"
  prompts=$("$python" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["prompts"]))' \
    "$corpus" 2>/dev/null) || die "--requests-per-pass: cannot count the prompts of $corpus"
  [ "$prompts" -ge 1 ] || die "--requests-per-pass: $corpus holds no prompts"
  run_args+=(--repeat "$(( (requests_per_pass + prompts - 1) / prompts ))")
fi
for role in base new; do
  n=${name[$role]}
  [ -n "$n" ] || die "--$role NAME is required: the name of its side (cpu, $(
    )rocm, main), in its round files' names r<N>-NAME.json"
  [[ "$n" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ && "$n" != *..* ]] \
    || die "--$role needs a side name of letters, digits, '.', '_' or '-'"
  [ -n "${start_cmd[$role]}" ] || die "--$role-start is required"
  [ -n "${url[$role]}${url_file[$role]}" ] || die "--$role-url or --$role-url-file is required"
  [ -z "${url[$role]}" ] || [ -z "${url_file[$role]}" ] \
    || die "--$role-url and --$role-url-file exclude each other"
done
[ "${name[base]}" != "${name[new]}" ] || die "--base and --new must differ"
check_pool_options

# the tool's command line for `run`: pinned with taskset to DRIVER_CPUS when that is set
set_driver() {
  driver=("${tool_run[@]}")
  if [ -n "${DRIVER_CPUS:-}" ]; then driver=(taskset -c "$DRIVER_CPUS" "${tool_run[@]}"); fi
}
tool_command
set_driver

# sets order: round N starts with base when N is odd and with new when N is even
# (rl.start_order)
order_of() { if [ $(( $1 % 2 )) -eq 1 ]; then order="base new"; else order="new base"; fi; }

# whether --until-decided looks after round $1 (rl.sequential_looks): from --min-rounds on,
# before the last round; up to 40 rounds after every round, beyond, look k of 40 after
# ceil(rounds k / 40) rounds, where `rounds --sequential` has its boundaries
looks_after() {
  local k n
  [ "$until_decided" -eq 1 ] && [ "$1" -ge "$min_rounds" ] && [ "$1" -lt "$rounds" ] || return 1
  [ "$rounds" -gt 40 ] || return 0
  if [ -z "$look_rounds" ]; then  # the 40 looks' rounds, worked out once, not each round
    look_rounds=" "
    for ((k = 1; k <= 40; k++)); do
      n=$(( (rounds * k + 39) / 40 ))
      if [ "$n" -lt 3 ]; then n=3; fi  # a look before round 3 is taken after round 3
      look_rounds+="$n "
    done
  fi
  [[ "$look_rounds" == *" $1 "* ]]
}
look_rounds=""

schedule() {  # what --dry-run prints
  if [ "$resume" -eq 1 ]; then
    printf 'resume: the complete rounds in %s are kept, not run again%s\n' "$dir" "$(
      [ "$until_decided" -eq 0 ] || echo "; no look before the last of them")"
  fi
  shown_args=""
  if [ ${#run_args[@]} -gt 0 ]; then printf -v shown_args '%q ' "${run_args[@]}"; fi
  for ((r = 1; r <= rounds; r++)); do
    order_of "$r"; for role in $order; do
      side=${name[$role]}
      printf 'round %d %s: start: %s\n' "$r" "$side" "${start_cmd[$role]}"
      printf 'round %d %s: run: ROUND=%d SIDE=%s %s run --url %s --corpus %s --out %s %s%s%s %s\n' \
        "$r" "$side" "$r" "$side" "${driver[*]}" "${url[$role]:-<from ${url_file[$role]}>}" \
        "$corpus" "$dir/r$r-$side.json" "--label $side --wait-ready $wait_ready" \
        "${metrics_url[$role]:+ --metrics-url ${metrics_url[$role]}}" \
        "${container[$role]:+ --router-container ${container[$role]}}" "$shown_args"
      printf 'round %d %s: stop: %s\n' "$r" "$side" "${stop_cmd[$role]:+${stop_cmd[$role]}, then }$(
        )SIGTERM to what still runs of its start command"
    done
    schedule_look "$r"
  done
  schedule_then
}
if [ "$dry_run" -eq 1 ] && [ "$pooled" -eq 1 ]; then
  pool_schedule 2>/dev/null || true
  exit 0
fi
if [ "$dry_run" -eq 1 ]; then
  schedule 2>/dev/null || true  # a reader that stops early (| head) ends nothing but the print
  exit 0
fi

# --- checks before the first router starts (a model load on a GPU node is not free) ---
command -v setsid >/dev/null \
  || die "setsid not found (util-linux): it gives each start command a session"
# whether the tool runs: checked by the first `run --check` below, which runs it; an error
# before that one passes first says so where the tool cannot run (--version), as a check of
# its own here did, one start of the tool more in each script
check_tool() {
  version=$("${driver[@]}" --version 2>&1) \
    || die "cannot run the tool: ${driver[*]} --version said: ${version:-nothing}$(
      [ "$tool_given" -eq 1 ] || printf '; --tool PATH names router_latency.py')"
}
tool_unchecked=1
[ -f "$corpus" ] && [ -r "$corpus" ] || die "cannot read the corpus file ($corpus)"
if [ ! -e "$dir" ]; then made_dir=1; fi
mkdir -p -- "$dir" 2>/dev/null || { made_dir=0; die "cannot create the folder ($dir)"; }

# the script's helpers, one Python program (plain JSON and the standard library, so that it
# works with any version of the tool), a mode each:
# run files: 'summary FILE...' prints each run's p50 per pass and errors, a line each (an
# empty line for one it cannot read); 'states CORPUS FILE...' prints, a line each, 0 for a
# complete run of that corpus, 1 for an incomplete or unreadable one and 3 for one of another
# corpus; 'incomplete FILE' marks a run "complete": false (its router ended while it ran),
# atomically.
# the network: 'answers URL' exits 0 when something accepts a connection at the URL's host and
# port; 'ports URL SESSION' prints "answers" when the URL answers, else the TCP ports the
# processes of the session listen on (Linux /proc; nothing where it cannot see them); 'ready
# URL...' the places of the URLs whose GET /ready answers.
# after a run, in one process: 'measured FILE URL LOOK' prints "listener pid session command"
# of each local process listening on the URL's port (where LOOK is 1), "hashes ..." (the run's
# x-vsr-config-hash values, where FILE exists) and "summary ..." (where it reads), a line each
helper() {
  "$python" - "$@" <<'PY'
import signal  # a Ctrl-C ends a helper quietly: the script's own trap says what happened
signal.signal(signal.SIGINT, signal.SIG_DFL)
import json, math, os, sys, urllib.parse  # hashlib and socket where a mode needs them
mode = sys.argv[1]


def shown(value):  # three significant digits, as the tool's tables
    if value is None:
        return "-"
    digits = max(0, 2 - math.floor(math.log10(abs(value)))) if value else 2
    return f"{value:.{digits}f}"


def summary(run):
    figures, errors, degraded = [], {}, 0
    for item in run.get("passes", []):
        found = item.get("summary")
        if not found:
            figures.append(f"{item.get('name')} discarded")
            continue
        figures.append(f"{item.get('name')} {shown(found.get('p50_ms'))}")
        for kind, count in (found.get("errors") or {}).items():
            errors[kind] = errors.get(kind, 0) + count
        degraded += found.get("degraded") or 0  # answers that skipped a signal (run/2)
    failed = sum(errors.values())
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(errors.items()))
    return (f"p50 ms {', '.join(figures)}; {failed} errors{f' ({kinds})' if kinds else ''}"
            + (f"; {degraded} degraded" if degraded else ""))


def hashes(path):
    seen = []
    def walk(item):
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "config_hashes" and isinstance(value, list):
                    seen.extend(h for h in value if isinstance(h, str) and h not in seen)
                else:
                    walk(value)
        elif isinstance(item, list):
            for value in item:
                walk(value)
    try:
        with open(path, encoding="utf-8") as handle:
            walk(json.load(handle))
    except (OSError, ValueError):
        pass
    return " ".join(seen)


def port_of(target):
    url = urllib.parse.urlsplit(target)
    return url, url.port or (443 if url.scheme == "https" else 80)


def listening():  # {"socket:[inode]": port} of every listening TCP socket of this host
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A":
                found[f"socket:[{fields[9]}]"] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


def listeners(port):
    inodes = {inode for inode, at in listening().items() if at == port}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        if links & inodes:
            comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
            yield pid, rest.split()[3], comm


if mode == "measured":
    path, target, look = sys.argv[2:5]
    if look == "1":
        for pid, session, comm in listeners(port_of(target)[1]):
            print("listener", pid, session, comm)
    if os.path.isfile(path):
        print("hashes", hashes(path))
    try:
        with open(path, encoding="utf-8") as handle:
            said = summary(json.load(handle))
    except Exception:  # unreadable: 'summary FILE' says why, or nothing, where it did
        sys.exit(0)
    print("summary", said)
    sys.exit(0)
if mode == "states":
    import hashlib
    sha = None
    for path in sys.argv[3:]:
        try:
            with open(path, encoding="utf-8") as handle:
                run = json.load(handle)
            if sha is None:
                with open(sys.argv[2], "rb") as handle:
                    sha = hashlib.sha256(handle.read()).hexdigest()
            if run.get("complete") is not True:
                print(1)
                continue
            print(0 if (run.get("corpus") or {}).get("sha256") == sha else 3)
        except (OSError, ValueError):  # unreadable: 1
            print(1)
        except Exception:  # not a run's document: 1, and Python's error on stderr
            import traceback
            traceback.print_exc()
            print(1)
    sys.exit(0)
if mode == "summary":  # a pool's instances, or one run: a line each
    for path in sys.argv[2:]:
        try:
            with open(path, encoding="utf-8") as handle:
                run = json.load(handle)
        except (OSError, ValueError):
            print()  # unreadable: the caller says so
            continue
        print(summary(run))
    sys.exit(0)
if mode == "incomplete":
    path = sys.argv[2]
    try:
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
    except (OSError, ValueError):
        sys.exit(1)
    if run.get("complete") is True:
        run["complete"] = False
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(run, handle, indent=1)
            handle.write("\n")
        os.replace(temporary, path)
    sys.exit(0)
import socket  # the network's modes
url, port = port_of(sys.argv[2])
if mode == "ports":
    try:
        socket.create_connection((url.hostname, port), timeout=2).close()
        print("answers")
        sys.exit(0)
    except OSError:
        pass
    sockets = listening()
    ports = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
            if stat[stat.rindex(")") + 2:].split()[3] != sys.argv[3]:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                ports.add(sockets.get(os.readlink(f"/proc/{pid}/fd/{fd}")))
        except (OSError, ValueError, IndexError):
            continue
    print(" ".join(map(str, sorted(ports - {None}))))
    sys.exit(0)
if mode == "ready":  # GET /ready answers 200, or 404 from a router without it: of several
    import http.client, ssl, threading  # URLs at once, the places of those that do, a line each
    def ready(address):
        where, at = port_of(address)
        connection = http.client.HTTPSConnection(where.hostname, at, timeout=2,
                                                 context=ssl._create_unverified_context()) \
            if where.scheme == "https" else http.client.HTTPConnection(where.hostname, at,
                                                                      timeout=2)
        try:
            connection.request("GET", "/ready")
            return connection.getresponse().status in (200, 404)
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()
    answers = [False] * (len(sys.argv) - 2)
    def look(i):
        answers[i] = ready(sys.argv[2 + i])
    threads = [threading.Thread(target=look, args=(i,)) for i in range(len(answers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("\n".join(str(i) for i, answer in enumerate(answers) if answer))
    sys.exit(0)
if mode == "answers":
    try:
        socket.create_connection((url.hostname, port), timeout=2).close()
    except OSError:
        sys.exit(1)
    sys.exit(0)
PY
}
run_file() { helper "$@"; }
net() { helper "$@"; }

refuse_if_answering() {  # before a side starts, nothing may answer at its URL
  local address=${url[$1]#*://} port
  address=${address%%/*}; port=${address##*]}
  if [[ "$port" == *:* ]]; then port=${port##*:}
  elif [[ "${url[$1]}" == https:* ]]; then port=443; else port=80; fi
  if net answers "${url[$1]}"; then
    die "port $port already answers (${url[$1]}, ${name[$1]}'s URL) $2: $(
      )a router from an earlier round still running? Stop it, or give --$1-url another port"
  fi
}

done_rounds=()  # rounds kept from an earlier, interrupted invocation (--resume)
set_aside=()    # files of the rounds it redoes
# round_files N: the files round N writes, one a line: r<N>-<side>.json each side, or with pools
# r<N>-<side>@<i>.json of each instance
round_files() {
  local role i
  for role in base new; do
    if [ "$pooled" -eq 0 ]; then echo "$dir/r$1-${name[$role]}.json"; continue; fi
    for ((i = 1; i <= instances; i++)); do echo "$dir/r$1-${name[$role]}@$i.json"; done
  done
}
shopt -s nullglob
existing=("$dir"/r*-"${name[base]}".json "$dir"/r*-"${name[new]}".json)
pooled_files=("$dir"/r*-"${name[base]}"@*.json "$dir"/r*-"${name[new]}"@*.json)
shopt -u nullglob
if [ $((${#existing[@]} + ${#pooled_files[@]})) -gt 0 ]; then
  found=("${existing[@]}" "${pooled_files[@]}")
  [ "$resume" -eq 1 ] || die "$dir already holds round files (${found[0]##*/}...); use an $(
    )empty folder, or --resume to keep the complete rounds and redo the rest"
  # --resume keeps rounds measured as this command measures them: a pool of another size, or
  # one instance a round where pools are asked for (or the other way), is not one of them
  if [ "$pooled" -eq 1 ] && [ ${#existing[@]} -gt 0 ]; then
    die "$dir holds rounds of one instance (${existing[0]##*/}), not pools of $instances: $(
      )--resume keeps rounds measured alike; use another folder"
  elif [ "$pooled" -eq 0 ] && [ ${#pooled_files[@]} -gt 0 ]; then
    die "$dir holds pools (${pooled_files[0]##*/}), not one instance a round: --resume $(
      )keeps rounds measured alike; give their --instances, or use another folder"
  fi
  for file in "${found[@]}"; do
    number=${file##*/r}; number=${number%%-*}
    [[ "$number" =~ ^[0-9]{1,9}$ ]] && [ "$((10#$number))" -le "$rounds" ] \
      || die "$dir holds ${file##*/}, beyond the $rounds rounds asked for"
    if [[ "$file" == *@*.json ]]; then
      i=${file##*@}; i=${i%.json}
      [[ "$i" =~ ^[0-9]{1,3}$ ]] && [ "$((10#$i))" -le "$instances" ] \
        || die "$dir holds ${file##*/}, beyond the pools of $instances asked for"
    fi
  done
  # a round is kept whole or redone whole: a pool's instances are started together and
  # measured in one round, so a round cut short is run again, every instance of both sides
  # the state of every round's files, in one process (helper states), not a process a file
  # (and a fork a round): 2,000 files for --until-decided --max-rounds 1000
  mapfile -t every < <(for ((r = 1; r <= rounds; r++)); do round_files "$r"; done)
  mapfile -t states < <(helper states "$corpus" "${every[@]}")
  each=$(( ${#every[@]} / rounds ))  # the files of a round
  for ((r = 1; r <= rounds; r++)); do
    complete=1
    wanted=("${every[@]:$(( (r - 1) * each )):$each}")
    k=$(( (r - 1) * each ))
    for file in "${wanted[@]}"; do
      state=${states[$k]:-1}; k=$((k + 1))
      [ "$state" -ne 3 ] || die "$file measured another corpus than $corpus"
      [ "$state" -eq 0 ] || complete=0
    done
    if [ "$complete" -eq 1 ]; then done_rounds+=("$r"); continue; fi
    for file in "${wanted[@]}"; do
      if [ -e "$file" ]; then set_aside+=("$file"); fi
    done
  done
fi

# the command lines checked before the first router starts: each side's `run --check` and
# `rounds` on an empty folder (with --until-decided, its --sequential too: the tool's own limit
# agrees with the script's), all in one start of the tool (--check-lines: each line's exit
# code and output, as it prints them run alone); one start a line where the tool does not
# answer so (an older --tool)
run_check() {  # sets words: the `run --check` of role $1
  local side=${name[$1]}
  # a side whose URL comes from a file is checked with a stand-in URL; its own is checked when
  # the run starts; --router-container is left out: the container does not exist before its
  # start
  words=(run --check --corpus "$corpus" --out "$dir/.check-$side.json" --label "$side"
         --wait-ready "$wait_ready" --url "${url[$1]:-http://127.0.0.1/}")
  if [ -n "${metrics_url[$1]}" ]; then words+=(--metrics-url "${metrics_url[$1]}"); fi
  words+=(${run_args[@]+"${run_args[@]}"})
}
rounds_check() {  # sets words: `rounds` on the empty folder $1
  words=(rounds --dir "$1" --base "${name[base]}" --new "${name[new]}" "${rounds_args[@]}")
  if [ "$until_decided" -eq 1 ]; then words+=(--sequential "$rounds"); fi
  words+=(${format_args[@]+"${format_args[@]}"} ${final_args[@]+"${final_args[@]}"})
}
answers=()  # each line's exit code and output, where --check-lines answered
if empty=$(mktemp -d 2>/dev/null); then
  lines=()
  for role in base new; do run_check "$role"; lines+=("${#words[@]}" "${words[@]}"); done
  rounds_check "$empty"; lines+=("${#words[@]}" "${words[@]}")
  while IFS= read -r -d '' field; do answers+=("$field"); done < <(printf '%s\0' "${lines[@]}" 2>/dev/null \
    | ROUND=1 env -u GITHUB_STEP_SUMMARY "${driver[@]}" --check-lines 2>/dev/null || true)
  rmdir -- "$empty"
  if [ ${#answers[@]} -eq 6 ] && [[ "${answers[0]}${answers[2]}${answers[4]}" =~ ^[0-9]+$ ]]
  then
    tool_unchecked=0  # it ran
    for k in 1 3 5; do  # as $( ) has them: no line break at the end
      while [[ "${answers[$k]}" == *$'\n' ]]; do answers[$k]=${answers[$k]%$'\n'}; done
    done
  else
    answers=()
  fi
fi
k=0
for role in base new; do
  side=${name[$role]}
  if [ ${#answers[@]} -eq 0 ]; then
    run_check "$role"
    code=0
    checked=$(ROUND=1 SIDE=$side "${driver[@]}" "${words[@]}" 2>&1) || code=$?
  else
    code=${answers[$k]} checked=${answers[$((k + 1))]}
  fi
  k=$((k + 2))
  [ "$code" -eq 0 ] || die "the options of $side's runs do not pass: $(
    )${checked#router-latency: error: }"
  tool_unchecked=0  # it ran
done
for role in base new; do
  if [ -n "${url[$role]}" ]; then refuse_if_answering "$role" "before the first round"; fi
done
if [ ${#answers[@]} -eq 0 ]; then
  empty=$(mktemp -d)
  rounds_check "$empty"
  judged=$(env -u GITHUB_STEP_SUMMARY "${driver[@]}" "${words[@]}" 2>&1) || true
  rmdir -- "$empty"
else
  judged=${answers[5]}
fi
[[ "$judged" == *"no r<N>-"* ]] \
  || die "the options for rounds do not pass: ${judged#router-latency: error: }"

if [ "$resume" -eq 1 ]; then
  for file in ${set_aside[@]+"${set_aside[@]}"}; do
    aside="$file.replaced"; i=2
    while [ -e "$aside" ]; do aside="$file.replaced.$i"; i=$((i + 1)); done
    mv -- "$file" "$aside"
    round=${file##*/r}
    say "resume: round ${round%%-*} is redone; ${file##*/} moved to ${aside##*/}"
  done
  kept_rounds=${done_rounds[*]:-}  # joined first: ${list[*]// /...} replaces in each item
  kept_rounds=${kept_rounds:+r${kept_rounds// /, r}}
  say "resume: complete rounds kept: ${kept_rounds:-none}"
fi

# --- the rounds ---
# a wait of one poll that starts no process (a sleep process a look, ~1.4 ms of CPU, while a
# router starts, a run measures and a side stops): read times out on a pipe that nobody
# writes to, opened once here; the start and stop commands and the runs get it closed.
# Whether a child still runs is asked of /proc (running), never of kill -0, which answers for
# a zombie: in the EXIT trap (Ctrl-C, an error) bash reaps no child while it only reads, so
# a run that ended on the SIGTERM after Ctrl-C seemed to run on until --stop-wait ran out
exec {nap_fd}<> <(:)
# the script's stderr as it was started, where the EXIT trap says its last words: a Ctrl-C
# that came while a look read /proc with its stderr sent to /dev/null ran the trap, and its
# "interrupted: ..." and "complete rounds: ..." lines, inside that redirection (lost, the
# exit code 130 alone; seen in 3 of 7 runs of the tests). Closed for what the script starts,
# as the pipe above is
if : >&2; then exec {err_fd}>&2; else exec {err_fd}>/dev/null; fi  # none: started 2>&-
# a read that ends before its time (the pipe at its end where /dev/fd only duplicates a
# descriptor, as on BSDs) naps with a sleep instead of turning every wait into a busy loop
nap() { read -r -t "$poll" -u "$nap_fd" _ || [ $? -gt 128 ] || sleep "$poll"; }
running() {  # whether process $1 runs: it exists and is not a zombie (without /proc, kill -0)
  local rest state session
  if { read -r rest < "/proc/$1/stat"; } 2>/dev/null; then
    stat_fields; [ "$state" != Z ]
  else
    [ ! -d /proc/self ] && kill -0 "$1" 2>/dev/null
  fi
}

active=""      # the role whose router may be up
start_pid=""   # its start command, leader of its own session
measuring=""   # the run file being written
interrupted=0
failed_runs=()

session_alive() {  # whether a process other than a zombie is left in session $1
  local alive
  sessions_alive "$1"; [ -n "$alive" ]
}

stop_side() {
  local role=$1 deadline
  if [ -n "${stop_cmd[$role]}" ]; then
    (ROUND=$r SIDE=${name[$role]} default_pipe bash -c -- "${stop_cmd[$role]}") \
      </dev/null >&2 {nap_fd}<&- {err_fd}>&- \
      || say "warning: stop command of ${name[$role]} failed"
  fi
  if [ -n "$start_pid" ] && session_alive "$start_pid"; then
    kill -TERM -- "-$start_pid" 2>/dev/null || true
    # by the clock: on a loaded machine each look through /proc takes a while
    now_ms; deadline=$((now + stop_wait * 1000))
    while session_alive "$start_pid" && now_ms && [ "$now" -lt "$deadline" ]; do
      nap
    done
    if session_alive "$start_pid"; then
      say "warning: ${name[$role]} still ran $stop_wait s after SIGTERM; sent SIGKILL"
      kill -KILL -- "-$start_pid" 2>/dev/null || true
    fi
  fi
  if [ -n "$start_pid" ]; then wait "$start_pid" 2>/dev/null || true; fi
  active=""; start_pid=""
}

finish() {
  local code=$?
  trap - INT TERM
  exec 2>&"$err_fd"  # its stderr as started, whatever redirection the signal came in
  if [ -n "$measuring" ] && [ -n "${run_pid:-}" ]; then
    kill -TERM "$run_pid" 2>/dev/null || true  # it saves what it measured
    local deadline
    now_ms; deadline=$((now + stop_wait * 1000))
    while running "$run_pid" && now_ms && [ "$now" -lt "$deadline" ]; do
      nap
    done
    if running "$run_pid"; then
      say "warning: the run still ran $stop_wait s after SIGTERM; sent SIGKILL"
      kill -KILL "$run_pid" 2>/dev/null || true
    fi
    wait "$run_pid" 2>/dev/null || true
  fi
  if [ -n "$active" ]; then stop_side "$active"; fi
  if [ ${#pool_pid[@]} -gt 0 ]; then stop_pools; fi
  if [ -n "${compiled:-}" ]; then rm -rf -- "$compiled"; fi
  if [ "$interrupted" -ne 0 ]; then
    local kept=() file whole
    for ((i = 1; i <= rounds; i++)); do
      whole=1
      while read -r file; do
        if [ ! -e "$file" ] || [ "$file" = "$measuring" ]; then whole=0; fi
      done < <(round_files "$i")
      if [ "$whole" -eq 1 ]; then kept+=("r$i"); fi
    done
    if [ -n "$measuring" ] && [ -e "$measuring" ]; then
      say "interrupted: $measuring is incomplete (\"complete\": false)"
    elif [ -n "$measuring" ]; then
      say "interrupted: $measuring was not written"
    else
      say "interrupted"
    fi
    say "complete rounds: ${kept[*]:-none}; $(
      )the same command with --resume keeps them and redoes the rest"
  fi
  exit "$code"
}
trap finish EXIT
# the tool byte-compiled once, into a folder of the script's own removed at its end: each run,
# look and judgement then starts without compiling the 1 MB file again (on a loaded 2-core
# node 0.7-1.3 s a start from the source, 0.3-0.5 s from the compiled file); where it cannot
# be compiled, the source as before
compiled=""
if [ "${tool_run[*]}" = "$python $tool" ] && [[ "$tool" == *.py ]] \
    && compiled=$(mktemp -d 2>/dev/null) && "$python" -c 'import py_compile, sys
py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' "$tool" \
      "$compiled/router_latency.pyc" 2>/dev/null; then
  tool_run=("$python" "$compiled/router_latency.pyc")
  set_driver
fi
trap 'interrupted=130; exit 130' INT
trap 'interrupted=143; exit 143' TERM

check_start() {  # sets start_why when the start command failed, or returned with no way to stop
  start_why=""
  if [ "$start_pid_done" -eq 1 ] || running "$start_pid"; then return 0; fi
  local code=0
  wait "$start_pid" 2>/dev/null || code=$?
  start_pid_done=1
  if [ "$code" -ne 0 ]; then
    start_why="exited $code"
  elif ! session_alive "$start_pid"; then
    if [ -z "${stop_cmd[$active]}" ]; then
      start_why="returned, leaving nothing running in its session (a detached router, such $(
        )as docker run -d?), and there is no --${active}-stop to stop it: give one, and stop $(
        )that router now"
    fi
  else
    left_behind=1  # it returned, leaving its router running in its session
  fi
}

# sets gone_why, once a second (RUN_ROUNDS_LOOK_MS), when the side's router is known to have
# ended: the processes its start command left running in its session are all gone, or its
# --*-container is not running (docker inspect); a start command that returned leaving
# nothing (docker run -d) without a container named cannot tell
check_gone() {
  gone_why=""
  [ "$start_pid_done" -eq 1 ] || return 0
  if [ "${1:-}" != now ]; then
    now_ms
    [ "$now" -ge "$next_gone_check" ] || return 0
    next_gone_check=$((now + look_ms))
  fi
  if [ "$left_behind" -eq 1 ] && ! session_alive "$start_pid"; then
    gone_why="every process its start command left running has ended"
  elif [ -n "${container[$active]}" ] && command -v docker >/dev/null; then
    local running
    running=$(docker inspect --format '{{.State.Running}}' -- "${container[$active]}" \
      2>/dev/null </dev/null) || running=absent
    if [ "$running" != true ]; then
      gone_why="its container ${container[$active]} is not running (docker inspect: $running)"
    fi
  fi
}

declare -A first_hashes=([base]="" [new]="")
reject() {  # set a run of the wrong router aside, so that --resume does not keep it
  mv -f -- "$1" "$1.rejected" 2>/dev/null || true
  die "$2; ${1##*/} moved to ${1##*/}.rejected"
}
# sets summary (and summarized=1) to the run's summary line where it read: the look at the
# listeners, the hashes and the summary are one process (helper measured)
check_router() {  # the router that answered must be the one started: $1 role, $2 URL, $3 file
  local role=$1 other=base host pid session comm found=0 elsewhere="" hashes="" look=0 line
  [ "$role" = new ] || other=new
  summary=""; summarized=0
  host=${2#*://}; host=${host%%/*}; host=${host%:*}; host=${host#[}; host=${host%]}
  if [[ "$host" == 127.* || "$host" == localhost || "$host" == ::1 ]] \
      && session_alive "$start_pid"; then
    look=1
  fi
  [ "$look" -eq 1 ] || [ -f "$3" ] || return 0
  while IFS= read -r line; do
    case "$line" in
      "listener "*)
        read -r pid session comm <<< "${line#listener }"
        if [ "$session" = "$start_pid" ]; then found=1; else elsewhere="pid $pid ($comm)"; fi ;;
      "hashes "*) hashes=${line#hashes } ;;
      "summary "*) summary=${line#summary }; summarized=1 ;;
    esac
  done < <(helper measured "$3" "$2" "$look")
  if [ "$found" -eq 0 ] && [ -n "$elsewhere" ]; then
    reject "$3" "${name[$role]}'s URL $2 is answered by $elsewhere, not by its start $(
      )command, which still runs (round $r): a router from an earlier round?"
  fi
  [ -f "$3" ] || return 0
  if [ -n "$hashes" ] && [ -n "${first_hashes[$other]}" ] && [ -n "${first_hashes[$role]}" ] \
      && [ "${first_hashes[$role]}" != "${first_hashes[$other]}" ] \
      && [ "$hashes" = "${first_hashes[$other]}" ]; then
    reject "$3" "${name[$role]} answered with ${name[$other]}'s configuration $(
      )(x-vsr-config-hash ${hashes:0:12}) in round $r: ${name[$other]}'s router still running?"
  fi
  if [ -z "${first_hashes[$role]}" ]; then first_hashes[$role]=$hashes; fi
}

# a router that listens on another port than its side's URL: said once a second
# (RUN_ROUNDS_LOOK_MS) is up and the URL still refuses while the start command's processes
# listen elsewhere (or, once a start command that detaches returned, its --*-container's
# published ports, docker port), naming the ports it listens on; the run goes on waiting, as
# a router may open its metrics port long before its API
check_port() {  # $1: the URL the run waits on
  [ "$port_said" -eq 0 ] || return 0
  now_ms
  [ "$now" -ge "$next_port_check" ] || return 0
  next_port_check=$((now + look_ms))
  local host=${1#*://} port ports metrics=""
  host=${host%%/*}; host=${host%:*}; host=${host#[}; host=${host%]}
  [[ "$host" == 127.* || "$host" == localhost || "$host" == ::1 ]] || { port_said=1; return 0; }
  port_of "$1"; port=$port_of  # no subshell: once a second of each run
  if [ -n "${metrics_url[$active]}" ]; then
    port_of "${metrics_url[$active]}"; metrics=$port_of
  fi
  ports=$(net ports "$1" "$start_pid") || return 0
  if [ "$ports" = answers ]; then port_said=1; return 0; fi
  if [ -z "$ports" ] && [ "$start_pid_done" -eq 1 ] && [ -n "${container[$active]}" ] \
      && command -v docker >/dev/null; then
    ports=$(docker port -- "${container[$active]}" 2>/dev/null </dev/null \
      | sed -n 's/.*:\([0-9][0-9]*\)$/\1/p' | sort -nu | tr '\n' ' ') || ports=""
    ports=${ports% }
  fi
  ports=" $ports "; ports=${ports// $metrics / }; ports=${ports# }; ports=${ports% }
  [ -n "$ports" ] || return 0
  port_said=1
  [[ " $ports " != *" $port "* ]] || return 0
  local plural=""
  [[ "$ports" != *" "* ]] || plural=s
  say "${name[$active]}'s router listens on port$plural ${ports// /, }, not on $port of its $(
    )URL $1 (round $r): give --$active-url with the port it listens on, or start it on $(
    )$port (the run waits up to --wait-ready $wait_ready s)"
}

router_given() {  # whether the run arguments name the router's process or cgroup already
  local arg
  for arg in ${run_args[@]+"${run_args[@]}"}; do
    case "$arg" in
      --router-pid|--router-pid=*|--router-session|--router-session=*|--router-cgroup|\
        --router-cgroup=*|--router-container|--router-container=*) return 0 ;;
    esac
  done
  return 1
}

measure_side() {
  local role=$1 side=${name[$1]} target code=0 deadline
  local file="$dir/r$r-$side.json"
  if [ -n "${url[$role]}" ]; then refuse_if_answering "$role" "(round $r)"; fi
  say "round $r/$rounds $side: starting"
  if [ -n "${url_file[$role]}" ]; then rm -f -- "${url_file[$role]}"; fi
  active=$role
  (ROUND=$r SIDE=$side default_pipe setsid bash -c -- "${start_cmd[$role]}") \
    </dev/null >&2 {nap_fd}<&- {err_fd}>&- &
  start_pid=$!
  start_pid_done=0
  left_behind=0
  next_gone_check=0
  port_said=0
  now_ms; next_port_check=$((now + look_ms))
  target=${url[$role]}
  if [ -n "${url_file[$role]}" ]; then
    now_ms; deadline=$((now + wait_ready * 1000))
    while now_ms && [ "$now" -lt "$deadline" ]; do
      [ -s "${url_file[$role]}" ] && break
      check_start
      [ -z "$start_why" ] || die "start command of $side $start_why (round $r)"
      check_gone
      [ -z "$gone_why" ] || die "$side's router ended before it wrote ${url_file[$role]}: $(
        )$gone_why (round $r)"
      nap
    done
    [ -s "${url_file[$role]}" ] || die "no URL in ${url_file[$role]} after $wait_ready s"
    first_line target "${url_file[$role]}"
  fi
  side_args=()
  if [ -n "${metrics_url[$role]}" ]; then side_args=(--metrics-url "${metrics_url[$role]}"); fi
  if [ -n "${container[$role]}" ]; then
    side_args+=(--router-container "${container[$role]}")
  elif ! router_given; then
    # the session the start command runs in: the router's CPU time per request and the
    # foreign CPU on its cores, for a router that stays in the foreground
    side_args+=(--router-session "$start_pid")
  fi
  measuring=$file
  # ROUND and SIDE reach the probes (run --probe), which run through the shell
  ROUND=$r SIDE=$side "${driver[@]}" run --url "$target" --corpus "$corpus" --out "$file" \
    --label "$side" --wait-ready "$wait_ready" --quiet \
    ${side_args[@]+"${side_args[@]}"} ${run_args[@]+"${run_args[@]}"} {nap_fd}<&- {err_fd}>&- &
  run_pid=$!
  start_why=""; gone_why=""
  while running "$run_pid"; do
    check_start
    [ -z "$start_why" ] || break
    check_port "$target"
    check_gone
    [ -z "$gone_why" ] || break
    nap
  done
  # the run saves what it measured, if anything
  if [ -n "$start_why$gone_why" ]; then kill -TERM "$run_pid" 2>/dev/null || true; fi
  wait "$run_pid" || code=$?
  if [ -z "$start_why$gone_why" ]; then
    case "$code" in
      130|143) interrupted=$code; exit "$code" ;;
    esac
    # a router killed under load fails the run's last requests on refused connections
    # faster than a look every $poll s: one more look once the run ended, whatever its pace
    check_start
    if [ -z "$start_why" ]; then check_gone now; fi
  fi
  measuring=""
  if [ -n "$start_why" ]; then  # set aside, so that --resume redoes it and rounds never reads it
    if [ -e "$file" ]; then reject "$file" "start command of $side $start_why (round $r)"; fi
    die "start command of $side $start_why (round $r)"
  fi
  if [ -n "$gone_why" ]; then
    # before it answered: no round can be run; while it was measured: a side that failed
    [ -e "$file" ] || die "$side's router ended before it answered: $gone_why (round $r)"
    run_file incomplete "$file"  # complete when the run ended before the look saw it
    stop_side "$role"
    say "round $r/$rounds $side: its router ended while it was measured: $gone_why; $(
      )${file##*/} is incomplete, and rounds counts the side as failed"
    return 0
  fi
  check_router "$role" "$target" "$file"
  stop_side "$role"
  # a summary the look could not make: 'summary FILE' says why (nothing, or Python's error)
  if [ "$summarized" -eq 0 ] && [[ "$code" == [01] ]]; then
    summary=$(run_file summary "$file") || true
  fi
  case "$code" in
    0) say "round $r/$rounds $side: $summary" ;;
    1) failed_runs+=("r$r $side")
       say "round $r/$rounds $side: $summary; $(
         )more failed requests (degraded answers included) than --max-errors allows" ;;
    *) die "round $r $side: run exited $code" ;;
  esac
}

judge() {  # run `rounds` on the folder; $1: extra arguments
  "${driver[@]}" rounds --dir "$dir" --base "${name[base]}" --new "${name[new]}" \
    "${rounds_args[@]}" "$@"
}
# a look is progress: its verdict goes to stderr, and only the final judgement reaches stdout,
# the job summary (GITHUB_STEP_SUMMARY), --junit and --html
look_at() { env -u GITHUB_STEP_SUMMARY "${driver[@]}" rounds --dir "$dir" \
  --base "${name[base]}" --new "${name[new]}" "${rounds_args[@]}" "$@"; }
final_judge() { judge --corpus "$corpus" ${final_args[@]+"${final_args[@]}"} "$@"; }

ran=0
final=""
futile=""   # the look that stopped for futility
last_kept=0  # the last round kept from before (--resume)
for kept in ${done_rounds[@]+"${done_rounds[@]}"}; do
  if [ "$kept" -gt "$last_kept" ]; then last_kept=$kept; fi
done
stopped=""  # the rounds run when the budget stopped the next
now_ms; budget_start=$now
for ((r = 1; r <= rounds; r++)); do
  if [[ " ${done_rounds[*]} " == *" $r "* ]]; then
    say "round $r/$rounds: kept from before (--resume)"
  else
    if [ -n "$budget_ms" ] && [ "$ran" -gt 0 ] && [ "$r" -gt 3 ]; then  # 3: the fewest judged
      now_ms; spent=$((now - budget_start))
      if [ $(( spent + spent / ran )) -gt "$budget_ms" ]; then
        minutes=minutes
        [ "$budget_minutes" != 1 ] || minutes=minute
        say "round $r would end past the budget ($budget_minutes $minutes; $(( spent / 1000 )) $(
          )s spent, about $(( spent / ran / 1000 )) s a round): stopping"
        stopped=$((r - 1))
        break
      fi
    fi
    if [ "$pooled" -eq 1 ]; then measure_pools; else
    order_of "$r"; for role in $order; do measure_side "$role"; done
    fi
    ran=$((ran + 1))
  fi
  # a look reads every round in the folder: none before the last round kept (--resume)
  if looks_after "$r" && [ "$r" -ge "$last_kept" ]; then
    code=0
    look=$(look_at --sequential "$rounds" 2>&1) || code=$?
    stop=""
    if [ "$code" -eq 3 ]; then
      # the rounds left cannot decide it: the look's own line, with what it could have missed
      stop=$(printf '%s\n' "$look" | grep -m1 '^stop: futility: ' || true)
    fi
    if [ "$code" -eq 3 ] && [ -z "$stop" ]; then
      verdict=$(printf '%s\n' "$look" | grep -m1 '^verdict: ' || true)
      verdict=${verdict#verdict: }
      verdict=${verdict#*not a pass: }  # the headline's what and why; the look is in the line
      say "look after $r of at most $rounds rounds: undecided, going on${verdict:+ ($verdict)}"
      continue
    fi
    if [ -n "$stop" ]; then
      say "look after $r of at most $rounds rounds: ${stop#stop: }"
      futile=$r
    fi
    final=$r
    break
  fi
done
total=${final:-${stopped:-$rounds}}
kept_note=""
if [ "$ran" -lt "$total" ]; then kept_note=" ($((total - ran)) kept from before)"; fi
code=0
if [ "$until_decided" -eq 1 ]; then
  final_judge --sequential "$rounds" ${format_args[@]+"${format_args[@]}"} || code=$?
  if [ "$code" -eq 2 ]; then
    say "stopped after $total rounds: rounds could not judge them (above)"
  elif [ -n "$futile" ]; then
    say "stopped for futility after $total of at most $rounds rounds: the rounds left $(
      )could not decide it$kept_note"
  elif [ -n "$final" ]; then
    say "decided after $total of at most $rounds rounds$kept_note"
  elif [ -n "$stopped" ]; then
    say "stopped by the budget after $total of at most $rounds rounds, undecided$kept_note"
  elif [ "$code" -eq 3 ]; then
    say "ran $total rounds, the most allowed: the last look left it undecided$kept_note"
  else
    say "ran $total rounds, the most allowed, and the last look decided$kept_note"
  fi
else
  final_judge ${format_args[@]+"${format_args[@]}"} || code=$?
  say "ran $total rounds$kept_note"
fi
if [ ${#failed_runs[@]} -gt 0 ]; then
  listed=$(printf '%s, ' "${failed_runs[@]}")
  say "runs with more failed requests (degraded answers included) than --max-errors allows: $(
    )${listed%, }"
  if [ "$code" -eq 0 ] || [ "$code" -eq 3 ]; then code=1; fi
fi
exit "$code"
