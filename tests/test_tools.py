"""Every script under tools/ imports beside the others in one process, as pytest imports them."""
import pathlib
import subprocess
import sys

TOOLS = pathlib.Path(__file__).resolve().parent.parent / "tools"


def test_all_tools_import_together_without_flag_clashes():
  names = sorted(path.stem for path in TOOLS.glob("*.py"))
  assert {"plot_curves", "profile_entity_encoding", "profile_train_step", "export_embeddings"} <= set(names)
  # A fresh interpreter: modules this pytest process already imported would hide a clash.
  script = f"import sys; sys.path.insert(0, {str(TOOLS)!r})\n" + "".join(f"import {name}\n" for name in names)
  completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
