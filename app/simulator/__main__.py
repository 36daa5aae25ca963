"""`python -m app.simulator --host 127.0.0.1 --port 8643`: run the upstream simulator."""

from __future__ import annotations

import argparse
from typing import Any

from app.simulator.server import run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m app.simulator",
        description="A fake OpenAI + Anthropic upstream with prompt-cache accounting and faults.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8643, help="0 picks a free port")
    parser.add_argument("--ttft-ms", type=float, help="delay before the first token")
    parser.add_argument("--tokens-per-second", type=float, help="output pace (0: unlimited)")
    parser.add_argument("--context-window", type=int, help="prompt token limit")
    parser.add_argument("--min-cacheable-tokens", type=int, help="shortest cached prefix")
    parser.add_argument("--required-key", help="accept only this API key")
    parser.add_argument("--model", help="model id listed by /v1/models")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = vars(_parser().parse_args(argv))
    host, port = args.pop("host"), args.pop("port")
    # Unset flags fall back to SimulatorConfig's defaults rather than overriding them.
    config: dict[str, Any] = {key: value for key, value in args.items() if value is not None}
    run(host, port, **config)


if __name__ == "__main__":
    main()
