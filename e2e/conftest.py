"""End-to-end suite (the dispatcher as a separate process, driven only through the Kubernetes API).

The scenarios arrive with the deployment issue; the test bed fixtures are already shared with tests/.
"""

pytest_plugins = ["multikueue.testing.fixtures"]
