"""The GPU image has torch but not the app's packages: the tests that need the app (doctor's
check reads Settings, which needs platformdirs) are left out there instead of failing to
collect beside the GPU tests."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("platformdirs") else ["test_offload_doctor.py"]
