"""The article's sleeping threads in Python, as a Python programmer writes them:
N threading.Threads (default 100,000) that each time.sleep(1), all joined.
Natively it stops where the kernel does (RuntimeError: can't start new thread)
and joins what it made; under weft-run every thread is a vthread.  One line,
key=value:
  created joined stopped_by wall_s create_s peak_rss_kib rss_per_thread_b

  python3 py_threads.py [N] [--deadline-s S]

--deadline-s: stop creating after S seconds (stopped_by=deadline) and join
what was made -- natively here it makes a few thousand a second, and never
reaches the kernel's limit, because each thread ends a second after it starts.
"""
import resource
import sys
import threading
import time


def main():
    args = sys.argv[1:]
    deadline = None
    if "--deadline-s" in args:
        i = args.index("--deadline-s")
        deadline = float(args[i + 1])
        del args[i:i + 2]
    n = int(args[0]) if args else 100000
    threads = []
    stopped = "none"
    t0 = time.monotonic()
    try:
        for _ in range(n):
            if deadline is not None and time.monotonic() - t0 > deadline:
                stopped = "deadline"
                break
            t = threading.Thread(target=time.sleep, args=(1,))
            t.start()
            threads.append(t)
    except RuntimeError:
        stopped = "RuntimeError"
    t1 = time.monotonic()
    for t in threads:
        t.join()
    t2 = time.monotonic()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    made = len(threads)
    print(f"created={made} joined={made} stopped_by={stopped} wall_s={t2 - t0:.3f} create_s={t1 - t0:.3f} "
          f"peak_rss_kib={rss} rss_per_thread_b={rss * 1024 / max(made, 1):.0f}", flush=True)
    return 0 if made == n else 1


if __name__ == "__main__":
    sys.exit(main())
