"""``python -m sim_instruments serve``: the simulated bench on raw-socket ports."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from . import _server
from ._extra import EXTRA, SimServed
from ._server import SimBench


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sim_instruments")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the simulated PSU and DMM on TCP ports")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--psu-port", type=int, default=5555, help="E36312A port (0: any)")
    serve.add_argument("--dmm-port", type=int, default=5556, help="34465A port (0: any)")
    serve.add_argument("--extra", action="append", default=[], metavar="NAME=PORT",
                       help="also serve a simulated NAME on PORT (smu: a Keithley 2450, "
                       "dmm6500: a Keithley DMM6500, e3631a: a Keysight E3631A, "
                       "dl3021: a Rigol DL3021, dp832: a Rigol DP832, "
                       "spd3303x: a Siglent SPD3303X)")
    serve.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    settings = commands.add_parser(
        "settings", help="the bench.yaml blocks a profile's settings and commands need")
    settings.add_argument("profiles", nargs="*",
                          default=["e36312a", "34465a", "k2450", "dmm6500", "e3631a",
                                   "dl3021", "dp832", "spd3303x"],
                          help="shipped profile names (default: the simulated bench's)")
    settings.add_argument("--write", action="store_true",
                          help="rewrite the generated blocks of bench.yaml in place")
    return parser


def _settings(names: Sequence[str], write: bool) -> int:
    from bench_gate.scpi import get_profile

    from ._extra import extra_for_profile, extra_yaml_path
    from ._resources import bench_yaml_path
    from ._settings import actions_yaml, settings_yaml, update_bench_yaml

    profiles = [get_profile(name) for name in names]
    if not write:
        for profile in profiles:
            print(f"# {profile.name}: properties\n{settings_yaml(profile)}"
                  f"# {profile.name}: dialogues\n{actions_yaml(profile)}", end="")
        return 0
    for profile in profiles:
        extra = extra_for_profile(profile.name)  # an instrument with a definition of its own
        path = extra_yaml_path(extra) if extra is not None else bench_yaml_path()
        path.write_text(update_bench_yaml(path.read_text(encoding="utf-8"), profile),
                        encoding="utf-8")
        print(f"rewrote the generated blocks of {profile.name} in {path}")
    return 0


async def _serve(host: str, psu_port: int, dmm_port: int, extras: dict[str, int]) -> None:
    _server.install_crash_hooks()  # test-only, from SIM_WRITE_DELAY/SIM_HANGUP_DROP/SIM_LOG
    bench = SimBench()
    await bench.start(host, psu_port, dmm_port)
    print(f"E36312A  {bench.psu_resource_name}", flush=True)
    print(f"34465A   {bench.dmm_resource_name}", flush=True)
    served = []
    try:
        for name, port in extras.items():
            one = SimServed(name)
            served.append(one)
            await one.start(host, port)
            print(f"{name:<8} {one.resource_name}  ({one.instrument.profile})", flush=True)
    except BaseException:
        for one in served:
            await one.stop()
        await bench.stop()
        raise
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on Windows
            loop.add_signal_handler(signum, done.set)
    try:
        await done.wait()
    finally:
        for one in served:
            await one.stop()
        await bench.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "settings":
        return _settings(args.profiles, args.write)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    extras: dict[str, int] = {}
    for spec in args.extra:
        name, _, port = spec.partition("=")
        if name not in EXTRA or not port.isdigit() or int(port) > 65535:
            print(f"--extra {spec!r}: write NAME=PORT with NAME one of {', '.join(EXTRA)} "
                  "and a port (0 picks a free one)", file=sys.stderr)
            return 2
        extras[name] = int(port)
    try:
        try:
            import uvloop  # answers sooner, like an instrument on its own hardware
        except ImportError:
            asyncio.run(_serve(args.host, args.psu_port, args.dmm_port, extras))
        else:
            uvloop.run(_serve(args.host, args.psu_port, args.dmm_port, extras))
    except OSError as exc:
        print(f"cannot serve the simulated bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
