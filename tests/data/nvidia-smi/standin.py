"""A stand-in nvidia-smi for the telemetry tests: the one-shot query, and the looping one
(-lms) at a constant power on GPU 0 (STANDIN_POWER W), GPU 1 at 100% and 400 W while the file
STANDIN_FLAG exists, the energy counter only with STANDIN_COUNTER=1 (else the field is refused,
as an old driver does)."""
import os, sys, time
args = sys.argv[1:]
power = float(os.environ.get("STANDIN_POWER", "150"))
flag = os.environ.get("STANDIN_FLAG")
counter = os.environ.get("STANDIN_COUNTER") == "1"
if "-lms" not in args:
    print("index, temperature.gpu, clocks.current.sm [MHz], clocks.current.memory [MHz], "
          "power.draw [W], utilization.gpu [%], memory.used [MiB]")
    print(f"0, 40, 1980 MHz, 3201 MHz, {power:.2f} W, 5 %, 900 MiB")
    print("1, 35, 345 MHz, 3201 MHz, 60.00 W, 0 %, 0 MiB")
    sys.exit(0)
fields = next(a for a in args if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
if not counter and "total_energy_consumption" in fields:
    print('Field "total_energy_consumption" is not a valid field to query.', flush=True)
    sys.exit(2)
units = {"clocks.sm": "clocks.current.sm [MHz]", "power.draw": "power.draw [W]",
         "utilization.gpu": "utilization.gpu [%]",
         "total_energy_consumption": "total_energy_consumption [mJ]"}
print(", ".join(units.get(f, f) for f in fields), flush=True)
interval = int(args[args.index("-lms") + 1]) / 1000
start = time.time()
for _ in range(100000):
    now = time.time()
    busy = bool(flag and os.path.exists(flag))
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    for index in (0, 1):
        row = {"timestamp": stamp, "index": str(index), "temperature.gpu": "40",
               "clocks.sm": "1980 MHz" if index == 0 else "345 MHz",
               "power.draw": f"{power:.2f} W" if index == 0 else ("400.00 W" if busy else "60.00 W"),
               "utilization.gpu": ("100 %" if busy else "0 %") if index else "5 %",
               "clocks_event_reasons.active": "0x0000000000000000",
               "total_energy_consumption": str(int(((power if index == 0 else 60) * (now - start) + 1e6) * 1000))}
        print(", ".join(row.get(f, "[N/A]") for f in fields), flush=True)
    time.sleep(interval)
