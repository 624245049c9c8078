#!/usr/bin/env bash
# Run N interleaved rounds of two router configurations and judge them with `rounds`.
#
# Each round starts a fresh router per side with that side's start command, waits until it
# answers, measures it with `router-latency run --out DIR/r<N>-<side>.json`, and stops it with
# the side's stop command before the other side starts. Sides alternate and the start order
# rotates (round 1: base then new; round 2: new then base; ...), so drift on the node (heat,
# a neighbour's job) falls on both sides alike. The script ends with `router-latency rounds`
# and exits with its exit code (0 pass, 1 regression or decision change, 2 bad input).
#
# Start and stop commands run through bash with ROUND and SIDE in their environment, for
# example:
#
#   rounds/run_rounds.sh --rounds 5 --dir results --corpus corpus.json \
#     --base cpu --base-url http://127.0.0.1:8801 \
#     --base-start 'docker run -d --name "router-$SIDE" --cpuset-cpus 0-15 -p 8801:8080 router:cpu' \
#     --base-stop 'docker rm -f "router-$SIDE"' \
#     --new rocm --new-url http://127.0.0.1:8802 \
#     --new-start 'docker run -d --name "router-$SIDE" --device /dev/kfd -p 8802:8080 router:rocm' \
#     --new-stop 'docker rm -f "router-$SIDE"' \
#     -- --concurrency 1,4,16
#
# Everything after `--` goes to each `router-latency run`, with ROUND and SIDE in its
# environment, so a probe can name the side's container:
#   -- --probe cpuset='docker exec "router-$SIDE" cat /sys/fs/cgroup/cpuset.cpus.effective'
# Set DRIVER_CPUS (for example 30-31)
# to pin the driver with taskset to cores the routers do not use. --dry-run prints the schedule
# and runs nothing. Only the start and stop commands given are run; nothing else is evaluated.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
tool="$here/../router_latency.py"
rounds=5
dir=""
corpus=""
wait_ready=300
tolerance=5
dry_run=0
declare -A name=([base]="" [new]="")
declare -A start_cmd=([base]="" [new]="")
declare -A stop_cmd=([base]="" [new]="")
declare -A url=([base]="" [new]="")
declare -A url_file=([base]="" [new]="")
declare -A metrics_url=([base]="" [new]="")
declare -A container=([base]="" [new]="")
run_args=()

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  cat <<'EOT'
Options:
  --rounds N              rounds to run (default 5)
  --dir DIR               folder for r<N>-<side>.json (created; must hold no round files)
  --corpus FILE           corpus file from `router-latency corpus`
  --base NAME, --new NAME side names (letters, digits, '.', '_', '-')
  --base-start CMD, --new-start CMD   start one side's router
  --base-stop CMD, --new-stop CMD     stop it (also run when the script fails)
  --base-url URL, --new-url URL       where the side answers
  --base-url-file F, --new-url-file F read the URL from F once the side started
  --base-metrics-url U, --new-metrics-url U  scrape the side's Prometheus metrics around
                          each pass (run --metrics-url)
  --base-container NAME, --new-container NAME  the side's Docker container: its CPU time per
                          request and the foreign vCPUs on its CPUs (run --router-container)
  --wait-ready SECONDS    how long a started router may take to answer (default 300)
  --tolerance PCT         passed to `rounds` (default 5)
  --tool PATH             router_latency.py to use (default: the one beside rounds/)
  --dry-run               print the schedule, run nothing
  -- ARGS                 extra arguments for every `router-latency run`
EOT
}

die() { printf 'run_rounds.sh: error: %s\n' "$1" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=${2?}; shift 2 ;;
    --dir) dir=${2?}; shift 2 ;;
    --corpus) corpus=${2?}; shift 2 ;;
    --base|--new) name[${1#--}]=${2?}; shift 2 ;;
    --base-start|--new-start) side=${1#--}; start_cmd[${side%-start}]=${2?}; shift 2 ;;
    --base-stop|--new-stop) side=${1#--}; stop_cmd[${side%-stop}]=${2?}; shift 2 ;;
    --base-url|--new-url) side=${1#--}; url[${side%-url}]=${2?}; shift 2 ;;
    --base-url-file|--new-url-file) side=${1#--}; url_file[${side%-url-file}]=${2?}; shift 2 ;;
    --base-metrics-url|--new-metrics-url) side=${1#--}; metrics_url[${side%-metrics-url}]=${2?}; shift 2 ;;
    --base-container|--new-container) side=${1#--}; container[${side%-container}]=${2?}; shift 2 ;;
    --wait-ready) wait_ready=${2?}; shift 2 ;;
    --tolerance) tolerance=${2?}; shift 2 ;;
    --tool) tool=${2?}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; run_args=("$@"); break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

[[ "$rounds" =~ ^[0-9]+$ ]] && [ "$rounds" -ge 3 ] || die "--rounds must be a whole number >= 3"
[ -n "$dir" ] || die "--dir is required"
[ -n "$corpus" ] || die "--corpus is required"
for role in base new; do
  n=${name[$role]}
  [[ "$n" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ && "$n" != *..* ]] \
    || die "--$role needs a side name of letters, digits, '.', '_' or '-'"
  [ -n "${start_cmd[$role]}" ] || die "--$role-start is required"
  [ -n "${stop_cmd[$role]}" ] || die "--$role-stop is required"
  [ -n "${url[$role]}${url_file[$role]}" ] || die "--$role-url or --$role-url-file is required"
done
[ "${name[base]}" != "${name[new]}" ] || die "--base and --new must differ"
[[ "$wait_ready" =~ ^[0-9]+$ ]] || die "--wait-ready must be whole seconds"

driver=("$python" "$tool")
if [ -n "${DRIVER_CPUS:-}" ]; then
  driver=(taskset -c "$DRIVER_CPUS" "$python" "$tool")
fi

# round N starts with base when N is odd and with new when N is even
order_of() { if [ $(( $1 % 2 )) -eq 1 ]; then echo "base new"; else echo "new base"; fi; }

if [ "$dry_run" -eq 1 ]; then
  shown_args=""
  if [ ${#run_args[@]} -gt 0 ]; then printf -v shown_args '%q ' "${run_args[@]}"; fi
  for ((r = 1; r <= rounds; r++)); do
    for role in $(order_of "$r"); do
      side=${name[$role]}
      printf 'round %d %s: start: %s\n' "$r" "$side" "${start_cmd[$role]}"
      printf 'round %d %s: run: ROUND=%d SIDE=%s %s run --url %s --corpus %s --out %s --label %s --wait-ready %s%s%s %s\n' \
        "$r" "$side" "$r" "$side" "${driver[*]}" "${url[$role]:-<from ${url_file[$role]}>}" \
        "$corpus" "$dir/r$r-$side.json" "$side" "$wait_ready" \
        "${metrics_url[$role]:+ --metrics-url ${metrics_url[$role]}}" \
        "${container[$role]:+ --router-container ${container[$role]}}" "$shown_args"
      printf 'round %d %s: stop: %s\n' "$r" "$side" "${stop_cmd[$role]}"
    done
  done
  printf 'then: %s rounds --dir %s --base %s --new %s --tolerance %s\n' \
    "${driver[*]}" "$dir" "${name[base]}" "${name[new]}" "$tolerance"
  exit 0
fi

mkdir -p -- "$dir"
if compgen -G "$dir/r*-${name[base]}.json" >/dev/null || compgen -G "$dir/r*-${name[new]}.json" >/dev/null; then
  die "$dir already holds round files; use an empty folder"
fi

running=""  # the role whose router is up, for the clean-up on failure
stop_side() {
  local role=$1
  ROUND=$r SIDE=${name[$role]} bash -c -- "${stop_cmd[$role]}" || \
    printf 'run_rounds.sh: warning: stop command of %s failed\n' "${name[$role]}" >&2
  running=""
}
cleanup() { if [ -n "$running" ]; then stop_side "$running"; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failed_runs=0
for ((r = 1; r <= rounds; r++)); do
  for role in $(order_of "$r"); do
    side=${name[$role]}
    printf 'round %d/%d: %s\n' "$r" "$rounds" "$side" >&2
    if [ -n "${url_file[$role]}" ]; then rm -f -- "${url_file[$role]}"; fi
    running=$role
    ROUND=$r SIDE=$side bash -c -- "${start_cmd[$role]}" || die "start command of $side failed"
    target=${url[$role]}
    if [ -n "${url_file[$role]}" ]; then
      for ((i = 0; i < wait_ready * 10; i++)); do
        [ -s "${url_file[$role]}" ] && break
        sleep 0.1
      done
      [ -s "${url_file[$role]}" ] || die "no URL in ${url_file[$role]} after $wait_ready s"
      target=$(head -n 1 -- "${url_file[$role]}")
    fi
    side_args=()
    if [ -n "${metrics_url[$role]}" ]; then side_args=(--metrics-url "${metrics_url[$role]}"); fi
    if [ -n "${container[$role]}" ]; then side_args+=(--router-container "${container[$role]}"); fi
    code=0
    # ROUND and SIDE reach the probes (run --probe), which run through the shell
    ROUND=$r SIDE=$side "${driver[@]}" run --url "$target" --corpus "$corpus" \
      --out "$dir/r$r-$side.json" --label "$side" --wait-ready "$wait_ready" --quiet \
      ${side_args[@]+"${side_args[@]}"} ${run_args[@]+"${run_args[@]}"} || code=$?
    stop_side "$role"
    case "$code" in
      0) ;;
      1) failed_runs=$((failed_runs + 1))
         printf 'run_rounds.sh: round %d %s had failed requests\n' "$r" "$side" >&2 ;;
      *) die "round $r $side: run exited $code" ;;
    esac
  done
done

code=0
"${driver[@]}" rounds --dir "$dir" --base "${name[base]}" --new "${name[new]}" \
  --tolerance "$tolerance" || code=$?
exit "$code"
