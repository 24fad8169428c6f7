"""Time every page in Chromium at 1400×900 and measure its height: `python -m app.measure_pages [TREE] [PORT]`
runs `streamlit run app/main.py` of TREE (default: this checkout) and prints JSON — first load (a fresh
session per page on a server whose caches one warm-up pass filled), warm switch (the second sidebar click
in one session) and stMain scrollHeight. Needs Debian chromium and playwright, as the browser tests do.
docs/log/2026-12-04-app-first-screen.md ran it on the old and the new tree."""
import json, os, re, subprocess, sys, tempfile, time, urllib.request


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "SPECLAB_LIVE_MODELS": "tiny", "SPECLAB_UPLOADS": tempfile.mkdtemp(), "PYTHONPATH": root}
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8766
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
                             "--server.fileWatcherType", "none", "--global.developmentMode", "false"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from app.site_map import PAGES as LISTED

    # title -> (URL path, heading): this checkout's page list, less the pages the measured tree does not have
    PAGES = {p.title: (p.url, p.heading) for p in LISTED if os.path.exists(os.path.join(root, "app", p.file))}
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.5)
        from playwright.sync_api import sync_playwright
        out = {"first": {}, "warm": {}, "height_px": {}}
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox", "--disable-gpu"])
            def done(pg, h1):
                pg.wait_for_timeout(50)
                pg.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", state="attached", timeout=120000)
                pg.get_by_role("heading", name=h1, exact=True).first.wait_for(timeout=120000)
                pg.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", state="attached", timeout=120000)
            warmup = b.new_context(viewport={"width": 1400, "height": 900}).new_page()  # server caches filled once
            for title, (path, h1) in PAGES.items():
                warmup.goto(f"{url}/{path}"); done(warmup, h1)
            warmup.context.close()
            for title, (path, h1) in PAGES.items():  # first load: a fresh session (a new visitor) on each page
                pg = b.new_context(viewport={"width": 1400, "height": 900}).new_page()
                t0 = time.monotonic(); pg.goto(f"{url}/{path}"); done(pg, h1)
                out["first"][title] = round(time.monotonic() - t0, 2)
                out["height_px"][title] = pg.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
                pg.context.close()
            pg = b.new_context(viewport={"width": 1400, "height": 900}).new_page()
            pg.goto(url); done(pg, "speclab")
            for rnd in range(2):
                for title, (path, h1) in PAGES.items():
                    t0 = time.monotonic()
                    pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title).click()
                    pg.wait_for_url(re.compile(f"/{path}$" if path else r"/(\?.*)?$")); done(pg, h1)
                    if rnd:
                        out["warm"][title] = round(time.monotonic() - t0, 2)
            print(json.dumps(out))
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
