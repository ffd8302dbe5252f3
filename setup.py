"""What ``pyproject.toml`` cannot say: the old import names' finder (``_pcs_ray_moved``) is installed at interpreter
start by a line in ``pcs_ray_moved.pth``, which must sit in site-packages itself.

A wheel installs the top of its build folder there. ``pip install -e`` builds a wheel of its own, the install
command's ``install_lib``, and installs its top there too; ``data_files`` would land elsewhere, and an editable
install skips them.
"""

from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build import build

PTH = "pcs_ray_moved.pth"


class build_pth(Command):
    """Writes the ``.pth`` file at the top of the wheel being built."""

    user_options = []
    editable_mode = False  # setuptools sets it for pip install -e

    def initialize_options(self) -> None:
        self.outputs = []

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        top = (self.get_finalized_command("install").install_lib if self.editable_mode
               else self.get_finalized_command("build").build_lib)
        self.outputs = [str(Path(top, PTH))]
        Path(top).mkdir(parents=True, exist_ok=True)
        Path(self.outputs[0]).write_text("import _pcs_ray_moved; _pcs_ray_moved.install()\n")

    def get_outputs(self) -> list[str]:
        return self.outputs

    def get_output_mapping(self) -> dict[str, str]:
        return {}


class build_with_pth(build):
    sub_commands = [*build.sub_commands, ("build_pth", None)]


setup(py_modules=["_pcs_ray_moved"], cmdclass={"build": build_with_pth, "build_pth": build_pth})
