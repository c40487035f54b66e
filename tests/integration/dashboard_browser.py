"""The dashboard in a real browser (Playwright driving Chromium), against a coordinator whose
job is running: the page loads with no console error, lists the workers by name, draws the
job's loss curve, plan and timeline, and updates as the job advances. A screenshot of the job's
page is written to SHOT.

usage: dashboard_browser.py URL JOB WORKER_NAME... --shot SHOT [--chromium PATH]
Exits 0 when every check passes, 1 naming the first that failed."""
import argparse
import re
import sys
import time

from playwright.sync_api import sync_playwright


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("job")
    ap.add_argument("workers", nargs="+")
    ap.add_argument("--shot", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    errors = []
    checks = 0

    def ok(what):
        nonlocal checks
        checks += 1
        print("ok:", what, flush=True)

    with sync_playwright() as p:
        # root in a container or CI: Chromium's sandbox needs user namespaces it may not have
        browser = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1800})
        page.on("console", lambda m: errors.append("console " + m.type + ": " + m.text)
                if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append("page error: " + str(e)))
        page.goto(a.url, wait_until="load")
        # the overview: the cluster lists every worker by name, the jobs table the job
        for name in a.workers:
            page.locator("#cluster").get_by_text(name, exact=False).first.wait_for(timeout=20000)
        ok("the cluster lists the workers " + ", ".join(a.workers))
        # each worker's speed against its profile: its stage's compute, measured / profiled
        for name in a.workers:
            speed = page.locator(f'#workers tr[data-worker="{name}"] td', has_text="x)").first
            speed.wait_for(timeout=20000)
            ok(f"{name}'s compute against its profile: {speed.inner_text()}")
        row = page.locator("#jobs tbody tr", has_text=a.job).first
        row.wait_for(timeout=20000)
        ok("the jobs table lists " + a.job)

        def shown_step():
            cells = row.locator("td").all_inner_texts()
            m = re.match(r"\s*(\d+)", cells[3]) if len(cells) > 3 else None
            return int(m.group(1)) if m else -1

        first = shown_step()
        deadline = time.time() + 30
        while shown_step() <= max(first, 0) and time.time() < deadline:
            page.wait_for_timeout(250)
        later = shown_step()
        if later <= max(first, 0):
            errors.append(f"the step shown did not advance in 30 s (from {first} to {later})")
        else:
            ok(f"the page updates as the job advances: step {first} then {later}")
        plot = page.locator('#plots svg[aria-label^="loss"] polyline').first
        plot.wait_for(timeout=20000)
        npoints = len(plot.get_attribute("points").split())
        if npoints < 2:
            errors.append(f"the overview's loss curve has {npoints} point(s)")
        else:
            ok(f"the overview draws the loss curve ({npoints} points)")

        # the job's page: its curves, plan and measured timeline
        page.goto(a.url.rstrip("/") + "/#/jobs/" + a.job, wait_until="load")
        page.locator('#job-curves svg[aria-label^="loss"] polyline').first.wait_for(timeout=20000)
        ok("the job's page draws its loss curve")
        page.locator('#job-plan svg[aria-label="plan"]').first.wait_for(timeout=20000)
        ok("the job's page draws its plan")
        tl = page.locator('#job-timeline svg[aria-label="timeline"]').first
        tl.wait_for(timeout=30000)
        bars = tl.locator("rect").count()
        if bars < 2:
            errors.append(f"the timeline draws {bars} bar(s)")
        else:
            ok(f"the job's page draws its timeline ({bars} bars)")
        page.screenshot(path=a.shot, full_page=True)
        ok("screenshot " + a.shot)
        browser.close()
    if errors:
        for e in errors:
            print("FAIL:", e)
        return 1
    print(f"dashboard_browser: {checks} checks passed, no console error")
    return 0


if __name__ == "__main__":
    sys.exit(main())
