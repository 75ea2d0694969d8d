#!/usr/bin/env python3
"""
report_test.py -- tests of `weft-bench report DIR --from FILE` (html_report.c).

    report_test.py numbers  WEFT_BENCH FIXTURE
    report_test.py chromium WEFT_BENCH FIXTURE [PNG_COPY]

numbers: the page drawn from FIXTURE (result lines saved from real
  compare.sh runs, tests/integration/data/report-lines.txt) is self-contained (no script,
  no external fetch), has its charts, and every number it prints from the
  lines -- the text of elements of class "v" -- is found among the numbers
  of the lines the report reads (result lines and "#" lines), after removing
  the digit grouping (the report's one rule: a value is printed as the line
  has it, digits grouped by threes).  The other way round, a sample of the
  fixture's values that the charts draw is found on the page.  The checker is
  shown to fail on a page with a number that is in no line.  The articles'
  figures (class "art") must be the published ones.  Bad input: a missing
  file, a bad option, no DIR, a line with HTML in it, a file with no result
  line (every chart says "No data").
chromium: headless Chromium renders the page to a PNG (sensible IHDR
  dimensions and size) with no console message; the same check on a page
  with a deliberate script error must see it (so the check can fail).
  PNG_COPY (optional): where to copy the PNG for a person to look at.

Exit 0 on success, 1 on failure, 77 (CTest's skip) when chromium is missing.
Every run works in its own temporary directory, removed at the end.
"""
import html.parser
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

GROUP = "\u202f"
PAGE_NUM = re.compile(r"\d+(?:" + GROUP + r"\d{3})*(?:\.\d+)?")
LINE_NUM = re.compile(r"\d+(?:\.\d+)?")

# The articles' published figures (../shared/seeds/README.md): what class
# "art" may hold.
PUBLISHED = {
    "467", "1316", "1769", "1780", "1755", "455", "1289", "2297", "3451", "5071",  # Java 21 req/s
    "108", "111", "212", "362", "711", "110", "113", "116", "136", "260",  # Java 21 p95 ms
    "32539", "14625956",  # Loom: threads
    "18.77", "11.52", "2.62",  # Loom: 100,000 sleeping tasks, s
    "367806", "190226",  # NIO.2: writes/s
    "491.98", "494.00",  # every 10th request sleeps 2 s
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


class ClassText(html.parser.HTMLParser):
    """Text under elements by class: self.text[cls] = list of strings."""

    VOID = {"br", "img", "meta", "link", "input", "hr", "line", "rect", "circle", "path"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []
        self.text = {}
        self.tags = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag in self.VOID:
            return
        cls = set((dict(attrs).get("class") or "").split())
        self.stack.append((tag, cls))

    def handle_startendtag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        active = set()
        for _, cls in self.stack:
            active |= cls
        for c in active or {""}:
            self.text.setdefault(c, []).append(data)


def read_lines_numbers(path):
    """The numbers of the lines the report reads: result lines and '#' lines."""
    nums = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s.startswith("#") or "experiment=" in s:
                nums.update(LINE_NUM.findall(s))
    return nums


def page_numbers(texts):
    out = []
    for t in texts:
        for m in PAGE_NUM.findall(t):
            out.append(m.replace(GROUP, ""))
    return out


def unknown_numbers(html_text, line_nums):
    """Values (class v) and the verbatim lines (class lines): numbers not in the lines."""
    p = ClassText()
    p.feed(html_text)
    nums = page_numbers(p.text.get("v", []))
    verbatim = page_numbers(p.text.get("lines", []))
    return nums, [n for n in nums + verbatim if n not in line_nums], p


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, **kw)


def make_report(bench, src, out_dir):
    r = run([bench, "report", out_dir, "--from", src])
    check(r.returncode == 0, f"weft-bench report {out_dir} --from {src}: exit {r.returncode}: {r.stderr.strip()}")
    page = os.path.join(out_dir, "report.html")
    check(r.stdout.strip() == page, f"report prints the page's path (got {r.stdout.strip()!r})")
    with open(page, encoding="utf-8") as f:
        return f.read()


def test_numbers(bench, fixture, tmp):
    page = make_report(bench, fixture, os.path.join(tmp, "out"))
    line_nums = read_lines_numbers(fixture)

    # self-contained, no script
    low = page.lower()
    check("<script" not in low, "the page has no <script>")
    check(not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", low), "the page fetches nothing from elsewhere")
    check(not re.search(r"@import|url\(", low), "the CSS loads nothing")
    check(not re.search(r"<[^>]+\son[a-z]+\s*=", low), "no event handler attributes")

    nums, unknown, parsed = unknown_numbers(page, line_nums)
    print(f"numbers: {len(nums)} numbers printed from the lines (class v); {len(set(nums))} distinct")
    check(len(nums) >= 120, f"the page prints at least 120 numbers from the lines (got {len(nums)})")
    check(not unknown, f"every printed number is in the lines; not found: {sorted(set(unknown))[:20]}")
    rnd = random.Random(13)
    sample = rnd.sample(nums, min(40, len(nums)))
    print("numbers: a sample, each found in the lines:", " ".join(sample))

    # the articles' figures are the published ones
    art = page_numbers(parsed.text.get("art", []))
    check(len(art) >= 20, f"the articles' figures are on the page (got {len(art)})")
    bad_art = [a for a in art if a not in PUBLISHED]
    check(not bad_art, f"class art holds only published figures; others: {bad_art}")

    # charts: SVG with bars, lines, ticks; no missing chart for the fixture's experiments
    check(parsed.tags.get("svg", 0) >= 9, f"at least 9 charts (got {parsed.tags.get('svg', 0)})")
    check(parsed.tags.get("rect", 0) >= 40, f"bars drawn (got {parsed.tags.get('rect', 0)} rects)")
    check(parsed.tags.get("circle", 0) >= 20, f"line-chart points drawn (got {parsed.tags.get('circle', 0)})")
    ticks = page_numbers(parsed.text.get("tick", []))
    check(len(ticks) >= 40, f"axes have tick labels (got {len(ticks)})")
    missing = "".join(parsed.text.get("missing", []))
    # the fixture has every experiment but http-db, which gets no section
    for sec in ("threads or park-many", "sleep-tasks lines", "http-delay or delay100", "file-write lines",
                "micro lines", "parallel lines"):
        check(sec not in missing, f"no 'No data' for {sec} with the fixture")
    check("machine nproc" not in page, "the machine line is shown without its '# machine' prefix")
    check(len(parsed.text.get("mach", [])) >= 1, "the machine facts are on the page")
    check("# compare.sh" in page and "# run.sh" in page, "the commands run are on the page")

    # the other way round: values the charts draw, taken from the fixture, are on the page.
    # Where several lines describe the same thing the report draws the last one (a summary,
    # rep=median, before any other): so does this.
    chosen = {}
    with open(fixture, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s.startswith("#") or "experiment=" not in s:
                continue
            kv = dict(t.split("=", 1) for t in s.split() if "=" in t)
            ident = tuple(kv.get(k) for k in ("experiment", "peer", "mode", "executor", "workload", "carriers",
                                               "concurrency", "n", "size", "cpu"))
            rank = 2 if kv.get("rep") == "median" or "reps" in kv else 1
            if ident not in chosen or rank >= chosen[ident][0]:
                chosen[ident] = (rank, kv)
    wanted = []
    keys = {"rps", "p95_ms", "ns_per_switch", "ns_per_task", "ns_per_op", "ops_s_mean", "ops_s_stddev", "wall_s"}
    for _, kv in chosen.values():
        exp = kv.get("experiment", "")
        for k in keys:
            if k not in kv or not LINE_NUM.fullmatch(kv[k]):
                continue
            if k == "wall_s" and exp not in ("sleep-tasks", "parallel"):
                continue
            if k == "ns_per_task" and exp != "spawn-join":
                continue
            if k == "rps" and exp not in ("http-delay", "delay100", "http-every10", "delay2s-every10", "http-db"):
                continue
            if k == "p95_ms" and exp not in ("http-delay", "delay100", "http-db"):
                continue
            if exp == "parallel" and kv.get("workload") == "mixed":
                continue
            wanted.append(kv[k])
    check(len(wanted) >= 30, f"the fixture has values to look for (got {len(wanted)})")
    present = set(nums)
    for v in rnd.sample(wanted, min(30, len(wanted))):
        check(v in present, f"the fixture's value {v} is printed on the page")

    # the checker can fail: a page with a number that is in no line
    forged = page.replace('<tspan class="v">', '<tspan class="v">987654321.25 ', 1)
    _, unk, _ = unknown_numbers(forged, line_nums)
    check("987654321.25" in unk, "the number check catches a number that is in no line")

    # bad input
    r = run([bench, "report", os.path.join(tmp, "x"), "--from", os.path.join(tmp, "no-such-file")])
    check(r.returncode == 1 and "no-such-file" in r.stderr, f"a missing --from file: exit 1 naming it ({r.returncode}: {r.stderr.strip()})")
    r = run([bench, "report"])
    check(r.returncode == 2 and "no DIR" in r.stderr, f"no DIR: usage error ({r.returncode}: {r.stderr.strip()})")
    r = run([bench, "report", os.path.join(tmp, "x"), "--only", "bogus"])
    check(r.returncode == 2 and "bogus" in r.stderr, f"--only bogus: usage error ({r.returncode})")
    r = run([bench, "report", os.path.join(tmp, "x"), "--frobnicate"])
    check(r.returncode == 2 and "--frobnicate" in r.stderr, f"an unknown option: usage error ({r.returncode})")
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    r = run([bench, "report", afile, "--from", fixture])
    check(r.returncode == 1 and "not a directory" in r.stderr, f"DIR is a file: exit 1 ({r.returncode}: {r.stderr.strip()})")

    # escaping: text from a line is HTML-escaped
    evil = os.path.join(tmp, "evil.txt")
    with open(evil, "w") as f:
        f.write("# machine nproc=2 kernel=<b>6.1</b> date=now&then\n")
        f.write("# compare.sh <script>alert(1)</script>\n")
        f.write("experiment=sleep-tasks peer=<img_src=x> status=ok n=100000 wall_s=1.5\n")
        f.write("experiment=switch peer=\"q'&amp; status=ok ns_per_switch=7.5\n")
        f.write("experiment=oops\n")
    p = make_report(bench, evil, os.path.join(tmp, "evil"))
    check("<script" not in p.lower() and "&lt;script&gt;" in p, "a '#' line's HTML is escaped")
    check("<img" not in p.lower() and "&lt;img_src=x&gt;" in p, "a peer name's HTML is escaped")
    check("<b>6.1" not in p and "&lt;b&gt;6.1" in p, "the machine line is escaped")
    check("&quot;q&#39;&amp;amp;" in p, "quotes and ampersands are escaped")

    # without --from: the experiments run through compare.sh ($WEFT_COMPARE here: a stand-in
    # that prints what the real one would, so that the test runs no benchmark)
    fake = os.path.join(tmp, "fake-compare.sh")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\n"
                "echo \"# fake compare.sh $1 (WEFT_BENCH=$WEFT_BENCH)\"\n"
                "echo '# machine nproc=2 kernel=test weft_carriers=2'\n"
                "case $1 in\n"
                # a daemon left behind with the report's pipe as its stdout must not hold the report
                "  micro) sleep 600 2>/dev/null </dev/null & echo $! > \"$SLEEPER_PID_FILE\"\n"
                "         echo 'experiment=switch peer=weft status=ok ns_per_switch=6.25'\n"
                "         echo 'experiment=switch peer=go-gosched status=ok ns_per_switch=58.125' ;;\n"
                "  file-write) echo 'experiment=file-write peer=weft status=ok mode=write size=5 "
                "ops_s_mean=3119205 ops_s_stddev=74969'; echo 'weft-bench: something failed' >&2; exit 3 ;;\n"
                # a failed weft run and a failed peer: both drawn, as failed (a weft failure line has
                # no value: it used to vanish from its chart)
                "  threads) echo 'experiment=threads peer=weft status=error err=-EAGAIN'\n"
                "           echo 'experiment=park-many peer=c-pthread status=failed n=200000 created=32385 err=EAGAIN' ;;\n"
                "  http-delay) echo 'experiment=http-delay peer=weft-virtual status=error concurrency=1000 n=3000 "
                "model=virtual err=-EMFILE'\n"
                "              echo 'experiment=http-delay peer=weft-virtual status=ok concurrency=50 n=3000 rps=455.5 "
                "p95_ms=110.2' ;;\n"
                "esac\n")
    os.chmod(fake, 0o755)
    run_dir = os.path.join(tmp, "run")
    sleeper = os.path.join(tmp, "sleeper.pid")
    r = run([bench, "report", run_dir, "--only", "micro,file-write,threads,http-delay"],
            env=dict(os.environ, WEFT_COMPARE=fake, SLEEPER_PID_FILE=sleeper))
    try:
        with open(sleeper) as f:
            os.kill(int(f.read().strip()), 9)
    except (OSError, ValueError):
        pass
    check(r.returncode == 0, f"report --only micro,file-write,... with a stand-in compare.sh: exit {r.returncode}: {r.stderr}")
    check("file-write: exit 3" in r.stderr, f"a failing experiment is reported and the rest go on ({r.stderr.strip()})")
    # progress: per experiment ([k/n ...]) and per point, as each lands
    for want in ("[1/4 threads]", "[2/4 micro]", "[3/4 file-write]", "[4/4 http-delay]",
                 "[2/4 micro] point 2: go-gosched: ok", "[1/4 threads] point 1: weft: error -EAGAIN",
                 "[4/4 http-delay] point 1: weft-virtual concurrency=1000 n=3000: error -EMFILE"):
        check(want in r.stderr, f"progress on stderr shows {want!r}")
    with open(os.path.join(run_dir, "lines.txt"), encoding="utf-8") as f:
        got = f.read()
    check(got.count("# report: ") == 8, f"lines.txt says what ran and how it ended ({got.count('# report: ')} '# report:' lines)")
    check("file-write exit 3" in got and "micro exit 0" in got, "exit statuses are in lines.txt")
    check("sleep-tasks" not in got, "--only runs only the experiments named")
    check(re.search(r"WEFT_BENCH=/\S*weft-bench", got) is not None, "compare.sh gets this weft-bench as $WEFT_BENCH")
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as f:
        rp = f.read()
    for v in ("6.25", "58.125", "3" + GROUP + "119" + GROUP + "205", "74" + GROUP + "969"):
        check(v in rp, f"the run's value {v!r} is on its page")
    # weft's failed run has its bar and its note, as the failed peer has
    check(re.search(r'class="label">weft</text><rect [^>]*width="0\.0"[^>]*/><text [^>]*class="val"> ?'
                    r'<tspan class="note">failed: error -EAGAIN</tspan>', rp) is not None,
          "a failed weft run is drawn (an empty bar, its note), not dropped")
    check('<tspan class="note">failed EAGAIN</tspan>' in rp, "a failed peer is drawn with its note")
    check('Failed, with nothing to draw: weft-virtual C=1000 n=3000: error -EMFILE' in rp,
          "a failed point of a line chart is named under it")
    r = run([bench, "report", os.path.join(tmp, "run2"), "--only", "micro"],
            env=dict(os.environ, WEFT_COMPARE=os.path.join(tmp, "no-such-compare.sh")))
    check(r.returncode == 1 and "no-such-compare.sh" in r.stderr, f"no compare.sh: exit 1 naming it ({r.returncode})")

    # a file with no result line: a page whose charts each say so
    empty = os.path.join(tmp, "empty.txt")
    with open(empty, "w") as f:
        f.write("# nothing ran\n")
    r = run([bench, "report", os.path.join(tmp, "empty"), "--from", empty])
    check(r.returncode == 0 and "no result line" in r.stderr, f"an empty file: a page and a warning ({r.returncode})")
    with open(os.path.join(tmp, "empty", "report.html"), encoding="utf-8") as f:
        e = f.read()
    nmiss = e.count('class="missing"')
    check(nmiss >= 8, f"every chart says it has no data (got {nmiss})")
    check("<svg" not in e, "no empty chart is drawn")


def png_ihdr(path):
    with open(path, "rb") as f:
        head = f.read(33)
    if len(head) < 33 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    w, h = struct.unpack(">II", head[16:24])
    return w, h


def chromium_render(chrome, url, png, tmp, size):
    home = tempfile.mkdtemp(prefix="home-", dir=tmp)
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=home, XDG_CACHE_HOME=home)
    cmd = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--user-data-dir=" + home,
           "--enable-logging=stderr", "--v=0", "--screenshot=" + png, "--window-size=" + size, url]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240, env=env)
    console = [l for l in r.stdout.splitlines() if ":CONSOLE" in l or "Uncaught" in l]
    return r.returncode, console, r.stdout


def test_chromium(bench, fixture, tmp, png_copy):
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chrome:
        print("SKIP: no chromium (Debian package chromium; scripts/deps.sh installs it)")
        return 77
    out = os.path.join(tmp, "out")
    make_report(bench, fixture, out)
    png = os.path.join(tmp, "report.png")
    rc, console, log = chromium_render(chrome, "file://" + os.path.join(out, "report.html"), png, tmp, "1200,4000")
    check(rc == 0, f"chromium exit {rc}; its output ends: {log[-1500:]}")
    check(not console, f"no console message while rendering the report: {console}")
    check(os.path.exists(png), "chromium wrote the PNG")
    if os.path.exists(png):
        dim = png_ihdr(png)
        size = os.path.getsize(png)
        print(f"chromium: {png}: {dim} pixels, {size} bytes")
        check(dim == (1200, 4000), f"the PNG is 1200 x 4000 as asked (IHDR says {dim})")
        # a blank 1200 x 4000 page compresses to a few KiB; the report's charts and text do not
        check(100_000 <= size <= 30_000_000, f"the PNG's size is sensible ({size} bytes)")
        if png_copy:
            try:
                shutil.copyfile(png, png_copy)
                print(f"chromium: copied to {png_copy}")
            except OSError as e:
                print(f"note: could not copy the PNG to {png_copy}: {e}")
    # it prints: Chromium's PDF of the page has several pages
    pdf = os.path.join(tmp, "report.pdf")
    home = tempfile.mkdtemp(prefix="home-", dir=tmp)
    r = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--user-data-dir=" + home, "--no-pdf-header-footer", "--print-to-pdf=" + pdf,
                        "file://" + os.path.join(out, "report.html")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
                       env=dict(os.environ, HOME=home))
    if check(r.returncode == 0 and os.path.exists(pdf), f"chromium prints the page to PDF (exit {r.returncode})"):
        with open(pdf, "rb") as f:
            data = f.read()
        pages = len(re.findall(rb"/Type\s*/Page[^s]", data))
        print(f"chromium: PDF {len(data)} bytes, {pages} pages")
        check(data.startswith(b"%PDF") and pages >= 4, f"the PDF has pages ({pages})")
    # the console check can fail: a page with a deliberate script error
    bad = os.path.join(tmp, "bad.html")
    with open(bad, "w") as f:
        f.write("<!DOCTYPE html><html><body><p>x</p><script>undefinedFunctionCall();</script></body></html>\n")
    rc, console, log = chromium_render(chrome, "file://" + bad, os.path.join(tmp, "bad.png"), tmp, "400,300")
    check(any("Uncaught" in l for l in console),
          f"the console check sees a deliberate script error (chromium exit {rc}; output ends: {log[-800:]})")
    return 0


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("numbers", "chromium"):
        print(__doc__, file=sys.stderr)
        return 2
    part, bench, fixture = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="weft-report-test-")
    try:
        if part == "numbers":
            test_numbers(bench, fixture, tmp)
        else:
            if test_chromium(bench, fixture, tmp, sys.argv[4] if len(sys.argv) > 4 else None) == 77:
                return 77
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
