"""Instructions per step of tether's loop and of its floor, counted by callgrind: repeatable
on a loaded machine, where wall and CPU time are not.

Each target runs the same sessions as ``bench/overhead.py`` / ``bench/backends.py`` (the
loopback server in its own process, not counted): two warm-up sessions, then ``--sessions``
sessions of ``--steps`` steps, the measured ones called through ``operator.call`` so that
callgrind (``--toggle-collect=_operator_call``) counts them alone — no imports, no start-up, no
warm-up. Targets: ``tether`` and ``floor`` (overhead.py's default tether row and its
``raw_httpx2`` floor), ``tether_no_trace``, and ``<provider>:tether|floor|backend`` for
``openai-chat``, ``openai-responses`` and ``anthropic`` (backends.py's rows).

``python bench/overhead_instr.py TARGET...`` runs each target under callgrind and prints the
instructions per model call and each ``:tether``/``tether`` target's ratio to its floor;
``--inside TARGET`` is the measured process itself. ``--opcodes`` counts the Python bytecodes
the measured sessions execute instead, in this process, without valgrind: it shows where the
interpreter's work is (a step of tether's loop runs about 1.4 times the floor's bytecodes, about
1.03 times its instructions: the floor's own work is much more in C, encoding the whole history
each step), but never judge a cut by it: moving a Python loop into chains of C calls (``map``,
``filter``, bound ``__instancecheck__``) cut bytecodes by 5 % here and added instructions and
time. Judge by instructions, and by ``timeit`` of the function before and after. The last line
is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

Session = Callable[[int], Awaitable[None]]
PROVIDERS = ("openai-chat", "openai-responses", "anthropic")


def _overhead_target(kind: str) -> tuple[Session, Any]:
    import overhead

    server = overhead.Server()
    trace_dir = Path(tempfile.mkdtemp()) / "traces"
    if kind == "floor":
        return overhead.raw_session(server), server
    if kind == "tether_no_trace":
        return overhead.tether_session(server, None, stream=False), server
    return overhead.tether_session(server, trace_dir, stream=False), server


def _backend_target(provider: str, kind: str) -> tuple[Session, Any]:
    import backends

    server = backends.Server(provider)
    if kind == "floor":
        return backends.raw_session(provider, server), server
    if kind == "backend":
        return backends.backend_session(provider, server), server
    return backends.tether_session(provider, server), server


def _opcodes(run: Callable[[], object]) -> int:
    """Python bytecodes ``run`` executes (``sys.settrace`` opcode events): the interpreter's share
    of the work, which callgrind's instructions weigh below its share of the time."""
    executed = [0]

    def each(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            executed[0] += 1
        return each

    def calls(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return each

    sys.settrace(calls)
    try:
        run()
    finally:
        sys.settrace(None)
    return executed[0]


def inside(target: str, steps: int, sessions: int, opcodes: bool = False) -> dict[str, Any]:
    """The measured process: warm up, then the counted sessions inside ``operator.call`` (or,
    with ``opcodes``, under an opcode counter)."""
    provider, _, kind = target.rpartition(":")
    session, server = _backend_target(provider, kind) if provider else _overhead_target(kind)
    loop = asyncio.new_event_loop()
    try:
        for _ in range(2):
            loop.run_until_complete(session(steps))

        async def counted() -> None:
            for _ in range(sessions):
                await session(steps)

        executed = _opcodes(lambda: loop.run_until_complete(counted())) if opcodes else 0
        if not opcodes:
            operator.call(loop.run_until_complete, counted())
    finally:
        loop.close()
        server.close()
    calls = sessions * (steps + 1)
    figures = {"target": target, "steps": steps, "sessions": sessions, "calls": calls}
    return figures | ({"opcodes": executed, "opcodes_per_call": round(executed / calls)} if opcodes else {})


def count(target: str, steps: int, sessions: int, out: Path) -> dict[str, Any]:
    """Run ``target`` under callgrind; its instructions per model call."""
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=_operator_call",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--inside",
        target,
        f"--steps={steps}",
        f"--sessions={sessions}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    summary = re.search(r"^summary:\s*(\d+)", out.read_text(), re.M)
    assert summary is not None, out
    figures["instructions"] = int(summary.group(1))
    figures["per_call"] = round(figures["instructions"] / figures["calls"])
    figures["profile"] = str(out)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", default=["tether", "floor"])
    parser.add_argument("--inside", help="run TARGET as the measured process")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--opcodes", action="store_true", help="count Python bytecodes in process instead (no valgrind)"
    )
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(inside(args.inside, args.steps, args.sessions)))
        return
    results: dict[str, Any] = {}
    unit, key = ("opcodes", "opcodes_per_call") if args.opcodes else ("instructions", "per_call")
    for target in args.targets:
        name = target.replace(":", "_")
        if args.opcodes:
            results[target] = inside(target, args.steps, args.sessions, opcodes=True)
        else:
            results[target] = count(target, args.steps, args.sessions, args.out / f"callgrind.{name}.out")
        print(f"{target:28s} {results[target][key]:>10,d} {unit} per model call", flush=True)
    for target, figures in results.items():
        provider, _, kind = target.rpartition(":")
        floor = results.get(f"{provider}:floor" if provider else "floor")
        if kind != "floor" and floor is not None:
            figures["ratio"] = round(figures[key] / floor[key], 3)
            print(f"{target:28s} {figures['ratio']:.3f}x the floor", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
