"""The ``grammarmask`` command: each subcommand's happy path, checked against external references
(``re``/``regex`` partial matching, ``lark``, the label set itself), and each bad input (exit code 2,
one line on stderr, no traceback)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import lark
import pytest
import regex

from grammarmask import cli

ROOT = Path(__file__).resolve().parent.parent
LABELS_FILE = ROOT / "examples" / "taxonomy.labels"
LABELS = LABELS_FILE.read_text(encoding="utf-8").splitlines()
# the CLI's labels default: one optional leading space (how BPE models spell a word after a prompt)
SENTENCES = {s.encode() for lab in LABELS for s in (lab, " " + lab)}
ARITH = ROOT / "grammars" / "arithmetic.lark"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == cli.EXIT_USAGE
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("grammarmask")
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def regex_file(tmp_path: Path) -> Path:
    p = tmp_path / "words.regex"
    p.write_text("[a-z]+( [a-z]+)*\n")
    return p


# --- mask -------------------------------------------------------------------------------------------


def test_mask_accepts_a_label_step_by_step(
    capsys: pytest.CaptureFixture[str], tekken_tokenizer: Any, tekken: Any
) -> None:
    text = "Technology > AI > NLP"
    code, out, _ = run(capsys, "mask", str(LABELS_FILE), "--tokenizer", "tekken", "--text", text, "--json")
    assert code == cli.EXIT_OK
    rep = json.loads(out)
    ids = tekken_tokenizer.encode(text, bos=False, eos=False)
    assert [s["token_id"] for s in rep["steps"]] == ids
    assert rep["result"] == "accepted"
    # the first step's legal count, from the label set itself: tokens whose bytes start some label
    prefixes = {s[:i] for s in SENTENCES for i in range(1, len(s) + 1)}
    want = sum(1 for b in tekken.token_bytes if b and b in prefixes)
    assert rep["steps"][0]["legal"] == want
    # a step is "forced" only when a single byte string can follow: then the legal count is small
    assert any(s["forced"] for s in rep["steps"])


def test_mask_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mask", str(LABELS_FILE), "--text", "Technology > AI > NLP")
    assert code == cli.EXIT_OK
    assert "forced" in out
    assert out.strip().splitlines()[-1].startswith("accepted")


def test_mask_rejects_with_the_step(capsys: pytest.CaptureFixture[str], tekken_tokenizer: Any) -> None:
    text = "Technology > AI > NLX"
    code, out, _ = run(capsys, "mask", str(LABELS_FILE), "--text", text, "--json")
    assert code == cli.EXIT_REJECTED
    rep = json.loads(out)
    ids = tekken_tokenizer.encode(text, bos=False, eos=False)
    assert rep["result"] == "rejected"
    # the reference: the first token after which no label starts with the output so far
    for n in range(1, len(ids) + 1):
        prefix = b"".join(tekken_tokenizer.id_to_byte_piece(t) for t in ids[:n])
        if not any(s.startswith(prefix) for s in SENTENCES):
            break
    assert rep["step"] == n


def test_mask_label_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "mask", str(LABELS_FILE), "--text", " Science", "--leading-space", "none")
    assert code == cli.EXIT_REJECTED
    code, _, _ = run(capsys, "mask", str(LABELS_FILE), "--text", "Science|Sports", "--separator", "|")
    assert code == cli.EXIT_OK
    code, _, _ = run(capsys, "mask", str(LABELS_FILE), "--text", "Science|Science", "--separator", "|")
    assert code == cli.EXIT_REJECTED  # no label twice


def test_mask_incomplete_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mask", str(LABELS_FILE), "--text", "Technology > A")
    assert code == cli.EXIT_REJECTED
    assert out.strip().splitlines()[-1].startswith("incomplete")


# --- check ------------------------------------------------------------------------------------------


def _first_bad_offset(pattern: str, data: str) -> int | None:
    """The external reference: the first character after which ``regex`` partial matching fails."""
    for i in range(1, len(data) + 1):
        if not regex.fullmatch(pattern, data[:i], partial=True):
            return i - 1
    return None


@pytest.mark.parametrize("text", ["abc de", "abc\nde1", "abc de ", "ab  cd", "x"])
def test_check_reports_line_and_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, regex_file: Path, text: str
) -> None:
    pattern = "[a-z]+( [a-z]+)*"
    f = tmp_path / "doc.txt"
    f.write_text(text)
    code, out, _ = run(capsys, "check", str(regex_file), str(f), "--json")
    res = json.loads(out)[0]
    bad = _first_bad_offset(pattern, text)
    if re.fullmatch(pattern, text):
        assert (code, res["status"]) == (cli.EXIT_OK, "ok")
    elif bad is None:
        assert (code, res["status"]) == (cli.EXIT_REJECTED, "incomplete")
    else:
        assert (code, res["status"]) == (cli.EXIT_REJECTED, "rejected")
        line = text.count("\n", 0, bad) + 1
        column = bad - (text.rfind("\n", 0, bad) + 1) + 1
        assert (res["line"], res["column"]) == (line, column)


def test_check_text_output_and_strip(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, regex_file: Path
) -> None:
    good, bad, prefix = tmp_path / "good.txt", tmp_path / "bad.txt", tmp_path / "prefix.txt"
    good.write_text("hello world\n")
    bad.write_text("hello\nwor1d")
    prefix.write_text("hello ")
    code, out, _ = run(capsys, "check", str(regex_file), str(good), "--strip")
    assert (code, out.strip()) == (cli.EXIT_OK, f"{good}: ok")
    code, out, _ = run(capsys, "check", str(regex_file), str(good), str(bad), str(prefix))
    lines = out.strip().splitlines()
    assert code == cli.EXIT_REJECTED
    assert "try --strip" in lines[0]
    assert lines[1].startswith(f"{bad}:1:6: rejected: byte '\\n' cannot continue")
    assert lines[2].startswith(f"{prefix}:1:7: incomplete")


def test_check_lark_grammar_agrees_with_lark(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    parser = lark.Lark(ARITH.read_text())
    docs = ["1 + 2 * x", "max(1, 2) ** -3", "(1 + ", "1 + * 2", "f(x,)"]
    paths = []
    for i, d in enumerate(docs):
        p = tmp_path / f"e{i}.txt"
        p.write_text(d)
        paths.append(str(p))
    _, out, _ = run(capsys, "check", str(ARITH), *paths, "--json")
    for d, res in zip(docs, json.loads(out)):
        try:
            parser.parse(d)
            ok = True
        except lark.exceptions.LarkError:
            ok = False
        assert (res["status"] == "ok") == ok, (d, res)


# --- sample -----------------------------------------------------------------------------------------


def test_sample_labels_and_regex(capsys: pytest.CaptureFixture[str], regex_file: Path) -> None:
    code, out, _ = run(capsys, "sample", str(LABELS_FILE), "-n", "5", "--seed", "3", "--json")
    assert code == cli.EXIT_OK
    docs = json.loads(out)
    assert len(docs) == 5 and all(d.encode() in SENTENCES for d in docs)
    code, out, _ = run(
        capsys, "sample", str(regex_file), "-n", "5", "--seed", "3", "--max-bytes", "30", "--json"
    )
    assert all(re.fullmatch("[a-z]+( [a-z]+)*", d) for d in json.loads(out))
    _, again, _ = run(
        capsys, "sample", str(regex_file), "-n", "5", "--seed", "3", "--max-bytes", "30", "--json"
    )
    assert again == out  # seedable


def test_sample_lark_outputs_parse_with_lark(capsys: pytest.CaptureFixture[str]) -> None:
    parser = lark.Lark(ARITH.read_text())
    code, out, _ = run(capsys, "sample", str(ARITH), "-n", "4", "--seed", "0", "--max-bytes", "40", "--json")
    assert code == cli.EXIT_OK
    for d in json.loads(out):
        parser.parse(d)


def test_sample_real_tokenizer(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sample", str(LABELS_FILE), "-n", "3", "--tokenizer", "tekken", "--json")
    assert code == cli.EXIT_OK
    assert all(d.encode() in SENTENCES for d in json.loads(out))


# --- bench -----------------------------------------------------------------------------------------


def test_bench_passes_arguments_to_the_harness(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["bench", "--help"]) == cli.EXIT_OK
    assert "--peer-python" in capfd.readouterr().out
    results = {
        "machine": {"cpu": "test cpu", "cores": 2, "python": "3.x", "os": "os", "date": "today"},
        "skipped_engines": {},
        "results": [
            {
                "workload": "w",
                "group": "Regex",
                "engine": "grammarmask",
                "tokenizer": "tekken",
                "status": "ok",
                "vocab_prep_s": 1.0,
                "compile_s": 0.01,
                "p50_us": 5.0,
                "p99_us": 50.0,
                "max_us": 99.0,
                "peak_rss_mb": 100.0,
                "refused": 0,
                "invalid_accepted": 0,
            },
        ],
    }
    src = tmp_path / "r.json"
    src.write_text(json.dumps(results))
    assert cli.main(["bench", "--render", str(src), "--out", str(tmp_path / "out")]) == cli.EXIT_OK
    table = (tmp_path / "out.md").read_text()
    assert "test cpu" in table and "| tekken | w | grammarmask | 10.0 | 5.0 | 50 | 99 | 100 | 0 |" in table


# --- bad input: one line, exit 2, no traceback ------------------------------------------------------


def test_missing_grammar_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "check", str(tmp_path / "nope.lark"), str(LABELS_FILE))
    assert_one_line_error(code, err, "nope.lark", "no such file")


def test_unknown_extension(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "grammar.yaml"
    p.write_text("x")
    code, _, err = run(capsys, "sample", str(p))
    assert_one_line_error(code, err, ".yaml", "--kind")


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("bad.regex", "(ab\n", "line 1, column 1"),
        ("bad.lark", "start: foo\n", "foo"),
        ("bad.json", '{"type": "object",\n "properties": }', "line 2, column 16"),
        ("empty.labels", "\n\n", "label"),
    ],
)
def test_bad_grammar(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, needle: str
) -> None:
    p = tmp_path / name
    p.write_text(text)
    code, _, err = run(capsys, "sample", str(p), "-n", "1")
    assert_one_line_error(code, err, name, needle)


def test_unknown_tokenizer(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "mask", str(LABELS_FILE), "--tokenizer", "gpt7", "--text", "x")
    assert_one_line_error(code, err, "gpt7", "tekken")


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "mask", str(LABELS_FILE))
    assert_one_line_error(code, err, "--text")
    code, _, err = run(capsys, "frobnicate")
    assert_one_line_error(code, err, "frobnicate")
    code, _, err = run(capsys, "sample", str(LABELS_FILE), "-n", "0")
    assert_one_line_error(code, err, "-n")


def test_unreadable_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "check", str(LABELS_FILE), str(tmp_path / "missing.txt"))
    assert_one_line_error(code, err, "missing.txt")


def test_missing_backend(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(cli.KINDS, "gbnf", ((".gbnf",), "grammarmask.frontends.not_there", "Gbnf"))
    p = tmp_path / "g.gbnf"
    p.write_text('root ::= "a"\n')
    code, _, err = run(capsys, "sample", str(p))
    assert_one_line_error(code, err, "gbnf backend", "not available")


def test_generate_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "generate", str(LABELS_FILE), "--model", str(tmp_path))
    if "torch and transformers" not in err:  # with the extras installed: the directory is checked
        assert_one_line_error(code, err, "not a Hugging Face model directory")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    code, _, err = run(capsys, "generate", str(LABELS_FILE), "--model", str(tmp_path))
    assert_one_line_error(code, err, "pip install")


def test_real_process_help_and_bad_input(tmp_path: Path) -> None:
    """Through the real entry point: useful help, and a bad file gives one line and exit 2."""
    proc = subprocess.run([sys.executable, "-m", "grammarmask", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for sub in ("mask", "check", "sample", "bench", "generate", "Exit codes"):
        assert sub in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "grammarmask", "check", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "line and column" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "grammarmask", "sample", str(tmp_path / "x.lark")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == cli.EXIT_USAGE
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# --- generate with a tiny local model (extras torch + transformers) -----------------------------------


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised one-layer Llama over a byte-level BPE tokenizer, saved like a download."""
    torch = pytest.importorskip("torch", reason="needs torch (pip install 'grammarmask[torch]')")
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    path = tmp_path_factory.mktemp("tiny-model")
    b2u = bytes_to_unicode()  # type: ignore[no-untyped-call]
    vocab = {"<s>": 0, "</s>": 1, **{b2u[b]: 2 + b for b in range(256)}}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    cfg = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


@pytest.mark.torch
@pytest.mark.transformers
def test_generate_with_a_tiny_local_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_model_dir: Path
) -> None:
    labels = tmp_path / "yn.labels"
    labels.write_text("yes\nno\nmaybe\n")
    code, out, err = run(
        capsys, "generate", str(labels), "--model", str(tiny_model_dir), "--prompt", "Answer: "
    )
    assert code == cli.EXIT_OK, err
    assert out.strip() in {"yes", "no", "maybe"}
    assert "bits per token" in err


@pytest.mark.torch
@pytest.mark.transformers
def test_generate_out_of_tokens_is_the_limit_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_model_dir: Path
) -> None:
    labels = tmp_path / "yn.labels"
    labels.write_text("yes\nno\nmaybe\n")  # byte-level tokens: no label fits in one token
    code, _, err = run(capsys, "generate", str(labels), "--model", str(tiny_model_dir), "--max-tokens", "1")
    assert code == cli.EXIT_LIMIT and code != cli.EXIT_REJECTED
    assert "stopped at --max-tokens 1" in err


@pytest.mark.torch
@pytest.mark.transformers
def test_generate_aligned_with_a_tiny_local_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_model_dir: Path
) -> None:
    labels = tmp_path / "yn.labels"
    labels.write_text("yes\nno\nmaybe\n")
    args = ["generate", str(labels), "--model", str(tiny_model_dir), "--prompt", "Answer: ", "--aligned"]
    code, out, err = run(capsys, *args, "--particles", "8", "--temperature", "1")
    assert code == cli.EXIT_OK, err
    assert out.strip() in {"yes", "no", "maybe"}
    assert re.search(r"aligned SMC: 8 particles, [1-9]\d* distinct finished strings", err), err
    assert "log P(L) estimate -" in err
    code, _, err = run(capsys, *args, "--max-tokens", "1")  # byte-level tokens: no label fits in one
    assert code == cli.EXIT_LIMIT and "no particle of 16 finished within --max-tokens 1" in err
    code, _, err = run(capsys, *args, "--temperature", "0")
    assert code == cli.EXIT_USAGE and "--temperature above 0" in err
    code, _, err = run(capsys, *args, "--particles", "0")
    assert code == cli.EXIT_USAGE and "--particles must be at least 1" in err


@pytest.mark.torch
@pytest.mark.transformers
def test_mask_with_a_model_reports_neg_log_z(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_model_dir: Path
) -> None:
    import torch
    import transformers

    labels = tmp_path / "yn.labels"
    labels.write_text("yes\nno\nmaybe\n")
    code, out, _ = run(capsys, "mask", str(labels), "--model", str(tiny_model_dir), "--text", "yes", "--json")
    assert code == cli.EXIT_OK
    steps = json.loads(out)["steps"]
    # the reference for step 1: the model's own probability of the tokens that start a sentence
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([[0]])).logits[0, -1].double(), -1)
    starts = {
        w[:i] for w in (b"yes", b"no", b"maybe", b" yes", b" no", b" maybe") for i in range(1, len(w) + 1)
    }
    legal = [2 + b[0] for b in starts if len(b) == 1]  # byte-level tokens: id = 2 + byte
    want = -float(torch.logsumexp(logp[legal], 0))
    assert steps[0]["neg_log_z"] == pytest.approx(want, rel=1e-6)  # float32 model arithmetic
    assert all(s["neg_log_z"] >= 0 for s in steps)
