"""Fuzz the HTTP API from its OpenAPI schema with schemathesis (pip install schemathesis):
a bounded number of generated cases per operation, checked for zero 5xx.

    python bench/fuzz.py                       # embedded default, 50 cases per operation
    python bench/fuzz.py --max-examples 200 --backend scale-out

Two passes against /api/schema/: as an operator (Authorization: Token ...) and as
the team's Lead (Authorization: Bearer <member token>), so both the operator
REST and the Team tools see generated input (all but wait_agent, which waits 10 s
to an hour by design). Only the server-error check runs:
a 4xx for nonsense is the contract; a 5xx on any input is a bug. The run fails
on any 5xx line or traceback in the server's log too, and prints the number of
cases schemathesis generated (docs/performance.md records the last run's).
"""
import argparse
import re
import subprocess
import sys

from common import Bench


def run_pass(url: str, header: str, max_examples: int, label: str) -> tuple[int, str]:
    cmd = [
        "schemathesis", "run", f"{url}/api/schema/",
        "--url", url,
        "--checks", "not_a_server_error",
        # wait_agent waits by design (10 s to an hour per call): not a fuzzing target.
        "--exclude-path", "/api/v1/tools/wait_agent",
        "--max-examples", str(max_examples),
        "--header", header,
        "--request-timeout", "30",
        "--workers", "1",
        "--seed", "5",
        "--no-color",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    out = result.stdout + result.stderr
    tail = "\n".join(out.strip().splitlines()[-12:])
    print(f"-- pass as {label}: exit {result.returncode}\n{tail}\n")
    return result.returncode, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--max-examples", type=int, default=50)
    args = parser.parse_args()
    bench = Bench(args.backend, processes=1)
    try:
        team = bench.provision("fuzz", 3, operator="fuzzer")
        url = bench.servers[0].url
        codes, cases = [], 0
        for label, header in (
            ("operator", f"Authorization: Token {team['operator']['token']}"),
            ("the Lead", f"Authorization: Bearer {team['lead']}"),
        ):
            code, out = run_pass(url, header, args.max_examples, label)
            codes.append(code)
            generated = re.search(r"(\d+) generated", out)
            cases += int(generated.group(1)) if generated else 0
        log = bench.servers[0].log()
        server_errors = len(re.findall(r'" 5\d\d ', log)) + log.count("Internal Server Error")
        tracebacks = log.count("Traceback")
        print(f"== fuzz on {args.backend}: {cases} cases ({args.max_examples} per operation and pass); "
              f"schemathesis exits {codes}; 5xx lines in the server log: {server_errors}; tracebacks: {tracebacks}")
        sys.exit(0 if all(c == 0 for c in codes) and server_errors == 0 and tracebacks == 0 else 1)
    finally:
        bench.close()


if __name__ == "__main__":
    main()
