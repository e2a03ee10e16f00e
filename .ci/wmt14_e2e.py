"""`--task wmt14` end to end through the command line under `torchrun` (2 CPU processes, gloo), offline: a synthetic
corpus in the file layout `extract_wmt14` writes, `train` to a validation BLEU figure, then `eval` on newstest2014
with beam search. Checks: exit codes; one tokenizer and one set of token arrays for both processes (the second waits
for the first's marker file); bitwise-equal weights on both ranks at the end; BLEU figures with sacreBLEU's
signature. Prints `wmt14_e2e: passed` or what failed; exit code 0 or 1.

    python .ci/wmt14_e2e.py
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(argv: list[str]) -> int:
    "The command line, with the wmt14 module imported first (importing it registers the task)."
    import annotated_transformer.wmt14  # noqa: F401
    from annotated_transformer.cli import main
    return main(argv)


def run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"wmt14_e2e: FAILED: {' '.join(cmd)} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def main() -> None:
    from annotated_transformer.wmt14 import write_synthetic_wmt14
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, out, digests = write_synthetic_wmt14(tmp / "data"), tmp / "run", tmp / "digests"
        digests.mkdir()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               "ANNOTATED_TRANSFORMER_PARAM_DIGEST": str(digests)}
        # tiny: 1,024 tokens a step = 2 processes x 512 tokens x 1 micro-batch
        run(["torchrun", "--standalone", "--nproc-per-node", "2", __file__, "--cli", "train", "--task", "wmt14",
             "--preset", "tiny", "--data-dir", str(data), "--out", str(out), "--accum-steps", "1", "--max-steps", "80",
             "--eval-every", "80", "--device", "cpu", "--threads", "1", "--no-progress"], env)
        ranks = sorted(digests.glob("rank*.sha256"))
        assert len(ranks) == 2, f"expected a digest from each of 2 ranks, got {ranks}"
        assert len({p.read_text() for p in ranks}) == 1, "the two ranks ended with different weights"
        arrays = [p for p in (data / "tokenized").iterdir() if p.is_dir()]
        assert len(arrays) == 1 and (arrays[0] / "done").is_file(), f"expected one set of token arrays, got {arrays}"
        last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "bleu" in line][-1]
        assert last["step"] == 80 and "tok:13a" in last["eval"]["signature"], last
        r = run([sys.executable, __file__, "--cli", "eval", "--checkpoint", str(out), "--split", "newstest2014", "--beam", "4",
                 "--device", "cpu"], env)
        test = json.loads(r.stdout.strip().splitlines()[-1])
        assert test["split"] == "newstest2014" and test["n"] == 60 and 0 <= test["bleu"] <= 100, test
        print(f"wmt14_e2e: passed (validation BLEU {last['bleu']:.2f} after {last['step']} steps on 2 processes; "
              f"newstest2014 BLEU {test['bleu']:.2f}, beam 4; {test['signature']})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--cli": sys.exit(cli(sys.argv[2:]))
    main()
