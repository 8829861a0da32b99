"""``--scripts-only``'s ``submit.sh``: one command submits every script it wrote, in the
order given, from a script's number on, and stops at the first script sbatch refuses with
the command that goes on from it. A DGX user's 90-point sweep printed 90 'submit with:
sbatch ...' lines and 90 'not ended' lines instead. Here bash runs the written file with
``sbatch`` a shell function that records its argv (the virtual cluster's real sbatch:
test_slurm_scripts_queue_cap.py), in a sweep directory whose name holds ``$(...)``, quotes,
``;`` and a glob: nothing of it runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.test_paste_safe import MARK, hostile_dir
from vitfsdp.launch.slurm import SUBMIT_FILE, submit_command, write_submit_script

#: sbatch, exported to the bash that runs submit.sh: it appends its arguments (one line,
#: NUL-separated) to ``calls`` and refuses a script whose path holds REFUSE (as a site
#: refuses the job beyond its cap)
STUB = ('sbatch() { printf "%s\\0" "$@" >> calls; echo >> calls; '
        'if [[ "${!#}" == *"$REFUSE"* ]]; then echo "sbatch: error: refused" >&2; return 1; fi; '
        'echo "Submitted batch job $RANDOM"; }\nexport -f sbatch\n')


def _paste(line: str, cwd: Path, refuse: str = "never") -> tuple[subprocess.CompletedProcess,
                                                               list[list[str]]]:
    """Run ``line`` as a user who pasted it; the process and each sbatch call's argv."""
    calls = cwd / "calls"
    calls.unlink(missing_ok=True)
    proc = subprocess.run(["bash", "-c", STUB + line], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "REFUSE": refuse})
    assert not list(cwd.glob(f"{MARK}*")), f"pasting {line!r} ran a command of the path"
    argv = [c.split("\0")[:-1] for c in calls.read_text().splitlines()] \
        if calls.exists() else []
    return proc, argv


def test_submit_sh_submits_in_order_and_goes_on_from_the_script_sbatch_refused(tmp_path):
    sweep_dir = hostile_dir(tmp_path)
    sweep_dir.mkdir()
    scripts = [sweep_dir / f"{n}_nodes={n},x=$(touch {MARK}9)" / "job.sbatch"
               for n in (0, 2, 1)]
    path = write_submit_script(sweep_dir, scripts)
    assert path == sweep_dir / SUBMIT_FILE and path.stat().st_mode & 0o111
    proc, argv = _paste(submit_command(sweep_dir), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert argv == [[str(s)] for s in scripts]  # every one, in the order given
    assert proc.stdout.count("Submitted batch job") == 3
    # a site's cap refuses the second: it stops there and names the command that goes on,
    # options and all
    proc, argv = _paste(f"{submit_command(sweep_dir)} 1 --hold --qos='a b'", tmp_path,
                        refuse="2_nodes")
    assert proc.returncode == 1 and argv == [["--hold", "--qos=a b", str(s)]
                                             for s in scripts[:2]]
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith(f"submit.sh: sbatch refused script 2 of 3 ({scripts[1]}); "), said
    go_on = said.split("go on with: ", 1)[1]
    proc, argv = _paste(go_on, tmp_path)  # once fixed
    assert proc.returncode == 0, proc.stderr
    assert argv == [["--hold", "--qos=a b", str(s)] for s in scripts[1:]]
    assert proc.stdout.strip().endswith("submit.sh: submitted scripts 2-3 of 3")
    proc, argv = _paste(f"{submit_command(sweep_dir)} 4", tmp_path)
    assert proc.returncode == 2 and argv == [] and "1-3, not '4'" in proc.stderr


def test_the_command_that_goes_on_without_options_passes_sbatch_none(tmp_path):
    """Refused without sbatch options, submit.sh named `bash submit.sh 2 ''` (bash's printf
    ' %q' with no argument prints ''), which ran `sbatch '' SCRIPT` and was refused again
    (a reviewer, on the virtual cluster's sbatch: 'Unable to open file')."""
    sweep_dir = tmp_path / "sweep"
    scripts = [sweep_dir / f"{n}_nodes={n}" / "job.sbatch" for n in (0, 1)]
    sweep_dir.mkdir()
    write_submit_script(sweep_dir, scripts)
    proc, argv = _paste(submit_command(sweep_dir), tmp_path, refuse="1_nodes")
    assert proc.returncode == 1 and argv == [[str(s)] for s in scripts]
    go_on = proc.stderr.strip().splitlines()[-1].split("go on with: ", 1)[1]
    assert go_on.endswith("submit.sh 2"), go_on
    proc, argv = _paste(go_on, tmp_path)
    assert proc.returncode == 0 and argv == [[str(scripts[1])]], proc.stderr
