"""Host checks of a configuration: paths other users cannot take over, and no export onto the
kubelet's own state files.

A socket or the state directory is safe when no directory on its way from ``/`` (every ancestor,
and the state directory itself) can be written by anyone but root or this process's user. The one
exception is a sticky directory such as ``/tmp``: there the next entry on the path must already
exist and belong to root (or this user), since the sticky bit keeps others from renaming or
removing it but not from creating it first. Symlinked paths are checked along the link and along
its target. :func:`validate_for_host` runs these checks for ``run`` (``check-config`` runs them
too).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from nri_plrm.checkpoint.kubelet_export import export_dir_problem
from nri_plrm.config.kubeconfig import kubeconfig_problems
from nri_plrm.config.settings import Config, ConfigError, format_value

_TRUSTED_GID = 0


@dataclass(frozen=True)
class GuardedPath:
    """A configured path the plugin trusts: its key, value, whether it is a directory that holds
    the plugin's files, and what a user who controls it could do."""

    key: str
    path: str
    is_dir: bool
    threat: str


def guarded_paths(config: Config, *, nri_socket: bool = True) -> list[GuardedPath]:
    """The paths :func:`path_problem` must accept for ``config``.

    ``nri_socket`` False leaves out ``nri.socket`` (containerd started the plugin on an
    already-connected socket).
    """
    paths = [
        GuardedPath(
            "state.dir",
            config.state.dir,
            True,
            "another user could replace the checkpoint and make the plugin restore allocations "
            "of their choosing",
        )
    ]
    if nri_socket:
        paths.insert(
            0,
            GuardedPath(
                "nri.socket",
                config.nri.socket,
                False,
                "another user could listen there, pose as containerd and make the plugin "
                "reserve CPUs for pods that do not exist",
            ),
        )
    if config.pod_resources.enabled:
        paths.append(
            GuardedPath(
                "pod_resources.socket",
                config.pod_resources.socket,
                False,
                "another user could replace the socket and answer monitoring clients with "
                "allocations of their choosing",
            )
        )
    return paths


def path_problem(path: str, *, is_dir: bool) -> str | None:
    """Why another user could take over ``path`` (None when nobody but root or this user can).

    ``is_dir``: ``path`` is a directory whose entries the plugin trusts (checked like an
    ancestor); otherwise it is a socket, whose owner must be root or this user when it exists.
    """
    trusted = {0, os.geteuid()}
    chains = [os.path.normpath(os.path.abspath(path))]
    real = os.path.realpath(chains[0])
    if real != chains[0]:
        chains.append(real)
    for leaf in chains:
        for directory, child in _walk(leaf, is_dir):
            try:
                st = os.lstat(directory)
            except FileNotFoundError:
                break
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                break
            problem = _directory_problem(directory, st, child, trusted)
            if problem is not None:
                return problem
        if not is_dir:
            try:
                st = os.lstat(leaf)
            except FileNotFoundError:
                continue
            if st.st_uid not in trusted:
                return f"{leaf} is owned by uid {st.st_uid}, not by root"
    return None


def _walk(leaf: str, is_dir: bool) -> Iterator[tuple[str, str | None]]:
    """Each directory from ``/`` down to ``leaf``'s parent (and ``leaf`` when ``is_dir``), with
    the next entry on the path below it (None below ``leaf`` itself)."""
    parts = [p for p in leaf.split("/") if p]
    current = "/"
    for part in parts:
        below = os.path.join(current, part)
        yield current, below
        current = below
    if is_dir and current != "/":
        yield current, None


def _directory_problem(
    directory: str, st: os.stat_result, child: str | None, trusted: set[int]
) -> str | None:
    mode = stat.S_IMODE(st.st_mode)
    shown = f"mode {stat.filemode(st.st_mode)}, uid {st.st_uid}, gid {st.st_gid}"
    if st.st_uid not in trusted:
        return f"directory {directory} is owned by uid {st.st_uid}, not by root ({shown})"
    if mode & stat.S_IWOTH:
        writers = "everyone"
    elif mode & stat.S_IWGRP and st.st_gid != _TRUSTED_GID:
        writers = f"group {st.st_gid}"
    else:
        return None
    if not mode & stat.S_ISVTX:
        return f"directory {directory} is writable by {writers} and not sticky ({shown})"
    if child is None:
        return f"directory {directory} is writable by {writers} ({shown})"
    try:
        owner = os.lstat(child).st_uid
    except FileNotFoundError:
        return (
            f"{child} does not exist in {directory}, which is writable by {writers} ({shown}): "
            "anyone could create it first; create it owned by root"
        )
    if owner not in trusted:
        return f"{child} is owned by uid {owner}, not by root, in {directory} ({shown})"
    return None


def host_problems(config: Config, *, nri_socket: bool = True) -> list[str]:
    """Every host-dependent problem of ``config``, as ``key.path: value: rule`` lines."""
    errors = []
    for guarded in guarded_paths(config, nri_socket=nri_socket):
        problem = path_problem(guarded.path, is_dir=guarded.is_dir)
        if problem is not None:
            errors.append(
                f"{guarded.key}: {format_value(guarded.path)}: {problem}: {guarded.threat}; "
                "use a directory only root can write (e.g. chmod go-w, chown root)"
            )
    if config.state.kubelet_state_dir:
        problem = export_dir_problem(
            config.state.kubelet_state_dir, config.state.kubelet_cpu_manager_state
        )
        if problem is not None:
            errors.append(
                f"state.kubelet_state_dir: {format_value(config.state.kubelet_state_dir)}: "
                f"{problem}"
            )
    return errors


def validate_for_host(config: Config, *, nri_socket: bool = True) -> None:
    """Raise ConfigError listing every problem :func:`host_problems` finds, and an unusable
    kubeconfig file (:func:`nri_plrm.config.kubeconfig.kubeconfig_problems`)."""
    errors = host_problems(config, nri_socket=nri_socket) + kubeconfig_problems(config)
    if errors:
        raise ConfigError(errors)
