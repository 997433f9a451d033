#!/usr/bin/env python3
"""Refit an rlgate fleet from Python and follow it as it runs. Standard library only.

    python3 refit.py --gateway http://127.0.0.1:30000 --version 42 --model-path /ckpt/step-42

It posts the refit to POST /v1/rl/refits with `Prefer: respond-async`, so the gateway answers
202 with the refit's id as soon as the refit is queued, then reads the refit's server-sent
events (GET /v1/rl/refits/{id}/events), printing one line per phase and per engine call as they
come, and finally the report (docs/refit-events.md has the contract).

Exit codes:
  0  the report's status is `succeeded`: every engine took the new weights
  3  the report has failed engines (status `partial` or `failed`: what the synchronous
     POST /v1/rl/refits answers 207 Multi-Status for)
  1  an error: the gateway refused the refit (4xx/5xx, e.g. 401, 400 invalid_request,
     409 refit_in_progress), could not be reached, or the events ended without a report
     before --timeout-secs (the refit may still run: look it up by its id)
  2  bad flags
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
# The gateway sends a keep-alive comment every 15 s: a read that waits this long means a dead link.
READ_TIMEOUT_S = 60
RECONNECTS = 5


class GatewayError(Exception):
    """The gateway answered with an error (its JSON envelope `{error, message, ...}`), or not at all."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Refit an rlgate fleet and follow its events.")
    p.add_argument("--gateway", required=True, help="the gateway's base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--version", help="the new weight version (required unless --request gives it)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-path", help="load the weights from this path on every engine (source kind disk)")
    src.add_argument("--request", metavar="FILE", help="a JSON refit request to send as it is (see docs/rl-control-plane.md)")
    p.add_argument("--selector", help="the engines to refit, e.g. role=rollout (default: all)")
    p.add_argument("--refit-id", help="the refit's id, so that a retry is the same refit (default: the gateway picks one)")
    p.add_argument("--admin-key", default=os.environ.get("RLGATE_ADMIN_KEY"), help="the gateway's admin key (default: $RLGATE_ADMIN_KEY)")
    p.add_argument("--timeout-secs", type=float, default=900.0, help="longest wait for the report (default 900)")
    p.add_argument("--json", action="store_true", help="print the final report as JSON on stdout (progress lines go to stderr)")
    args = p.parse_args(argv)
    if args.request is None and not args.version:
        p.error("--version is required with --model-path")
    return args


def build_request(args: argparse.Namespace) -> dict:
    if args.request is not None:
        try:
            with open(args.request, encoding="utf-8") as f:
                body = json.load(f)
        except (OSError, ValueError) as e:
            raise GatewayError(f"cannot read {args.request}: {e}") from e
        if not isinstance(body, dict):
            raise GatewayError(f"{args.request} must hold a JSON object")
    else:
        body = {"source": {"kind": "disk", "model_path": args.model_path}}
    if args.version:
        body["weight_version"] = args.version
    if args.selector:
        body["selector"] = args.selector
    if args.refit_id:
        body["refit_id"] = args.refit_id
    return body


class Gateway:
    def __init__(self, base_url: str, admin_key: str | None):
        self.base = base_url.rstrip("/")
        self.admin_key = admin_key

    def _headers(self, extra: dict[str, str]) -> dict[str, str]:
        h = dict(extra)
        if self.admin_key:
            h["Authorization"] = f"Bearer {self.admin_key}"
        return h

    def _open(self, req: urllib.request.Request, timeout: float):
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {}
            if not isinstance(payload, dict):
                payload = {}
            code = payload.get("error")
            message = payload.get("message") or raw.decode("utf-8", "replace").strip() or e.reason
            raise GatewayError(f"HTTP {e.code} {code or ''}: {message}".replace("  ", " "), e.code, code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise GatewayError(f"cannot reach the gateway at {self.base}: {reason}") from None

    def submit(self, body: dict) -> tuple[int, dict]:
        """POST the refit asking for 202; returns (status, answer)."""
        req = urllib.request.Request(
            f"{self.base}/v1/rl/refits",
            data=json.dumps(body).encode(),
            method="POST",
            headers=self._headers({"Content-Type": "application/json", "Accept": "application/json", "Prefer": "respond-async"}),
        )
        with self._open(req, READ_TIMEOUT_S) as resp:
            return resp.status, json.loads(resp.read())

    def events(self, path: str, last_event_id: str | None):
        """Yields (id, event, data) from the SSE stream at `path` until the server ends it."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        req = urllib.request.Request(urllib.parse.urljoin(self.base + "/", path), headers=self._headers(headers))
        with self._open(req, READ_TIMEOUT_S) as resp:
            yield from read_sse(resp)


def read_sse(stream):
    """Parses text/event-stream: `field: value` lines, a blank line ends an event, `:` lines are
    comments (yielded as (None, None, None))."""
    event_id, event, data = None, "message", []
    for raw in stream:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield event_id, event, "\n".join(data)
            event_id, event, data = None, "message", []
            continue
        if line.startswith(":"):
            # A comment (the keep-alive): handed on so the caller can check its deadline.
            yield None, None, None
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id":
            event_id = value
        elif field == "event":
            event = value
        elif field == "data":
            data.append(value)


def ms(v) -> str:
    return "-" if v is None else f"{v} ms"


def engines(n: int) -> str:
    return f"{n} engine" if n == 1 else f"{n} engines"


def progress_line(e: dict) -> str | None:
    """One line for a refit event; None for events that say nothing new."""
    kind = e.get("type")
    if kind == "accepted":
        skipped = e.get("skipped") or []
        return (f"accepted: refit {e.get('refit_id')} to version {e.get('weight_version')} "
                f"({e.get('source')}), {engines(len(e.get('targets') or []))}, {len(skipped)} left out")
    if kind == "started":
        line = f"started on replica {e.get('replica')}: quorum {e.get('quorum')}, steps {', '.join(e.get('steps') or [])}"
        return line + (f" (recovered in {e['recovered']})" if e.get("recovered") else "")
    if kind == "phase":
        step = f" {e['step']} ({e.get('step_index', 0) + 1}/{e.get('steps')})" if e.get("step") else ""
        return f"phase {e.get('phase')}{step}: {engines(len(e.get('targets') or []))}"
    if kind == "leg":
        where = f"{e.get('phase')}" + (f" {e['step']}" if e.get("step") else "")
        if e.get("outcome") == "ok":
            return f"  {e.get('url')}  {where}  ok  {ms(e.get('latency_ms'))}"
        status, message = e.get("status"), e.get("message") or ""
        # The gateway's message may open with the engine's status already.
        if status is not None and message.startswith(f"HTTP {status}: "):
            message = message[len(f"HTTP {status}: "):]
        return (f"  {e.get('url')}  {where}  FAILED {e.get('error')}"
                + (f" (HTTP {status})" if status is not None else "") + (f": {message}" if message else ""))
    if kind == "takeover":
        return f"takeover: replica {e.get('to')} goes on from {e.get('from')} in {e.get('phase')}"
    return None


def report_lines(r: dict) -> list[str]:
    lines = [f"refit {r.get('id')}: {r.get('status')}, {r.get('succeeded')}/{r.get('total')} engines at version "
             f"{r.get('weight_version')}, {r.get('duration_ms')} ms"
             + (f", aborted: {r['aborted']}" if r.get("aborted") else "")]
    for e in r.get("engines") or []:
        if e.get("outcome") == "ok":
            lines.append(f"  ok      {e.get('url')}  version {e.get('weight_version')}")
        else:
            where = e.get("failed_phase") or "?"
            if e.get("failed_step"):
                where += f" {e['failed_step']}"
            lines.append(f"  failed  {e.get('url')}  in {where}: {e.get('error')} {e.get('message') or ''}".rstrip())
    for s in r.get("skipped") or []:
        message = f": {s['message']}" if s.get("message") else ""
        lines.append(f"  skipped {s.get('url')}  {s.get('reason')}{message}")
    return lines


def follow(gw: Gateway, refit_id: str, path: str, deadline: float, out) -> dict:
    """Prints the refit's events as they come and returns its report; reconnects where it stopped."""
    last_id = None
    for attempt in range(RECONNECTS + 1):
        try:
            for event_id, _, data in gw.events(path, last_id):
                if time.monotonic() > deadline:
                    break
                if data is None:
                    continue
                if event_id is not None:
                    last_id = event_id
                e = json.loads(data)
                if e.get("type") == "report":
                    return e["report"]
                line = progress_line(e)
                if line:
                    print(line, file=out, flush=True)
        except GatewayError as err:
            # A refit that is gone, or a key refused, does not come back by asking again.
            if err.status is not None and 400 <= err.status < 500:
                raise
            why = str(err)
        except (OSError, ValueError) as err:
            why = f"the event stream broke: {err}"
        else:
            why = "the event stream ended before the report"
        if time.monotonic() > deadline:
            raise GatewayError(f"no report within the timeout; refit {refit_id} may still run (GET /v1/rl/refits/{refit_id})")
        if attempt < RECONNECTS:
            print(f"{why}; reconnecting", file=sys.stderr, flush=True)
            time.sleep(min(2 ** attempt * 0.25, 4))
    raise GatewayError(f"{why}; refit {refit_id} may still run (GET /v1/rl/refits/{refit_id})")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    gw = Gateway(args.gateway, args.admin_key)
    deadline = time.monotonic() + args.timeout_secs
    try:
        status, answer = gw.submit(build_request(args))
        if status == 202:
            refit_id = answer["id"]
            print(f"refit {refit_id} queued; following {answer.get('events')}", file=out, flush=True)
            path = answer.get("events") or f"/v1/rl/refits/{urllib.parse.quote(refit_id)}/events"
            report = follow(gw, refit_id, path, deadline, out)
        else:
            # A gateway that does not do respond-async answers the report itself (200 or 207).
            report = answer
    except GatewayError as err:
        print(f"refit refused or failed: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(report_lines(report)), flush=True)
    return EXIT_OK if report.get("status") == "succeeded" else EXIT_PARTIAL


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
