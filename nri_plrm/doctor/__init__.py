"""``nri-plrm doctor``: read-only checks of a node before and after installing the plugin.

One module per area (containerd, kubelet, the node's cgroups and the plugin's config, the running
plugin); each check is a small function returning a :class:`~nri_plrm.doctor.result.Check`.
:func:`nri_plrm.doctor.runner.run_checks` runs them all. Nothing here writes a file or starts a
program, and every probe of a process (containerd's ``Version``, ``/healthz``, PodResources
``List``) has a timeout.
"""
