"""Map the repository's top-level folders under one installed namespace.

The design card fixes the folders app/ engine/ agent/ tools/ at the repository root; installed,
they become m3agent.app, m3agent.engine, ... (never bare top-level names).
"""

from setuptools import find_packages, setup

ROOTS = ("app", "engine", "agent", "tools")

packages = []
package_dir = {}
for root in ROOTS:
    package_dir[f"m3agent.{root}"] = root
    packages.append(f"m3agent.{root}")
    packages += [f"m3agent.{p}" for p in find_packages(include=[f"{root}.*"])]

setup(packages=packages, package_dir=package_dir)
