"""``nri-plrm scheduler-extender``: run the kube-scheduler HTTP extender
(``nri_plrm.scheduler.server``) until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from collections.abc import Callable
from typing import TextIO

import httpx2

from nri_plrm.cli.inputs import EXIT_OK, CommandError, UsageError
from nri_plrm.config.settings import ConfigError
from nri_plrm.podsource.client import KubeConfigError, load_kube_config, new_pod_api
from nri_plrm.scheduler.extender import Extender
from nri_plrm.scheduler.server import ExtenderServer
from nri_plrm.scheduler.settings import ExtenderSettings, load_settings, parse_settings

DEFAULT_CONFIG = "/etc/nri-plrm/scheduler-extender.toml"


def add_parser(new_parser: Callable[..., argparse.ArgumentParser], prog: str) -> None:
    """Register ``scheduler-extender`` through ``new_parser``, the sub-command parsers'
    ``add_parser``."""
    parser = new_parser(
        "scheduler-extender",
        help="run the kube-scheduler extender that decides like the nodes' engines",
        description=(
            "Serve the kube-scheduler extender API (filter, prioritize, bind; "
            "k8s.io/kube-scheduler/extender/v1) over HTTP, deciding for each candidate node "
            "with the node's own engine over the exact state its NodeResourceTopology object "
            "publishes. A pod no node can ever admit is reported unresolvable with the "
            "kubelet's reason and the cause. Also serves /metrics and /healthz. Settings: the "
            "[scheduler_extender] table of --config (docs/scheduler-extender.md)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        + "\n".join(
            f"  {line}"
            for line in (
                f"{prog} scheduler-extender --config {DEFAULT_CONFIG}",
                f"{prog} scheduler-extender --address 127.0.0.1:9742 --kubeconfig ~/.kube/config",
            )
        ),
    )
    parser.add_argument(
        "--config",
        default=None,
        help=f"TOML file with a [scheduler_extender] table (default: {DEFAULT_CONFIG} if it "
        "exists, else the built-in defaults)",
    )
    parser.add_argument("--address", help="host:port to listen on (overrides the file)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (overrides the file)")
    parser.set_defaults(handler=cmd_scheduler_extender)


def settings_of(args: argparse.Namespace) -> ExtenderSettings:
    """The settings from ``--config`` and the overrides; raises UsageError."""
    try:
        if args.config is not None:
            settings = load_settings(args.config)
        else:
            try:
                settings = load_settings(DEFAULT_CONFIG)
            except ConfigError as exc:
                if "cannot read" not in str(exc):
                    raise
                settings = ExtenderSettings()
        overrides = {}
        if args.address:
            overrides["address"] = args.address
        if args.kubeconfig:
            overrides["kubeconfig"] = args.kubeconfig
        if overrides:
            lines = [f'{k} = "{v}"' for k, v in overrides.items()]
            checked = parse_settings("[scheduler_extender]\n" + "\n".join(lines), "command line")
            settings = dataclasses.replace(settings, **{k: getattr(checked, k) for k in overrides})
    except ConfigError as exc:
        raise UsageError(*exc.errors) from exc
    return settings


def cmd_scheduler_extender(args: argparse.Namespace, out: TextIO) -> int:
    """``scheduler-extender``."""
    settings = settings_of(args)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        http = new_pod_api(load_kube_config(settings.kubeconfig)).http
    except KubeConfigError as exc:
        raise CommandError(str(exc)) from exc
    return asyncio.run(_serve(settings, http))


async def _serve(settings: ExtenderSettings, http: httpx2.AsyncClient) -> int:
    server = ExtenderServer(settings, http, Extender(settings, time.monotonic))
    try:
        await server.start()
    except OSError as exc:
        raise CommandError(f"scheduler_extender.address {settings.address!r}: {exc}") from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    return EXIT_OK
