"""Code that exists for one CLI command (``status``, ``logs``, ``explain``, ``adapter check``), not for the controller.

Each module reads the cluster (or a file) once and renders what it found; none runs in ``multikueue run``.
"""
