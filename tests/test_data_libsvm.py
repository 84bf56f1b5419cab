"""load_libsvm against sklearn.datasets.load_svmlight_file: fixtures, features, errors, fuzz."""
import bz2
import glob
import gzip
import io
import os

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file, load_svmlight_files

import sklearn
from gluon_sparse.data import LibSVMDataset, LibSVMStream, load_libsvm, locate_row
from gluon_sparse.data._libsvm_parser import parse_libsvm_bytes, team_size

SKLEARN_DATA = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "tests", "data")
HEART_SCALE = "/work/shared/data/heart_scale"
VALID_FIXTURES = ["svmlight_classification.txt", "svmlight_multilabel.txt"]
INVALID_FIXTURES = ["svmlight_invalid.txt", "svmlight_invalid_order.txt"]


def assert_same(ours, reference, multilabel=False):
    X, y = ours
    X_ref, y_ref = reference
    assert sp.isspmatrix_csr(X) and X.has_sorted_indices
    assert X.shape == X_ref.shape
    np.testing.assert_array_equal(X.indptr, X_ref.indptr)
    np.testing.assert_array_equal(X.indices, X_ref.indices)
    np.testing.assert_array_equal(X.data, X_ref.data.astype(X.dtype))
    if multilabel:
        assert [len(t) for t in y] == [len(t) for t in y_ref]
        np.testing.assert_array_equal([v for t in y for v in t], [v for t in y_ref for v in t])
    else:
        np.testing.assert_array_equal(y, y_ref)


def write(tmp_path, text, name="data.libsvm"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def test_sklearn_fixtures_are_installed():
    found = {os.path.basename(p) for p in glob.glob(os.path.join(SKLEARN_DATA, "svmlight_*.txt"))}
    assert set(VALID_FIXTURES + INVALID_FIXTURES) <= found


@pytest.mark.parametrize("name", VALID_FIXTURES)
@pytest.mark.parametrize("zero_based", ["auto", True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_valid_sklearn_fixtures_match(name, zero_based, dtype):
    path = os.path.join(SKLEARN_DATA, name)
    multilabel = "multilabel" in name
    kwargs = dict(zero_based=zero_based, multilabel=multilabel)
    assert_same(load_libsvm(path, dtype=dtype, **kwargs),
                load_svmlight_file(path, dtype=np.dtype(dtype), **kwargs), multilabel)


def test_invalid_label_fixture_raises_naming_file_line_and_token():
    path = os.path.join(SKLEARN_DATA, "svmlight_invalid.txt")
    with pytest.raises(ValueError):
        load_svmlight_file(path)
    with pytest.raises(ValueError, match=r"svmlight_invalid\.txt, line 1: invalid label 'python'"):
        load_libsvm(path)


def test_invalid_order_fixture_raises_when_sorted_order_is_required():
    path = os.path.join(SKLEARN_DATA, "svmlight_invalid_order.txt")
    with pytest.raises(ValueError):
        load_svmlight_file(path)
    with pytest.raises(ValueError, match=r"line 1: feature index 2 in '2:-5.2' is smaller"):
        load_libsvm(path, allow_unsorted=False)


def test_unsorted_rows_are_sorted_by_default(tmp_path):
    # The same rows written in order are what scikit-learn accepts.
    unsorted = write(tmp_path, "-1 5:2.5 2:-5.2 15:1.5\n1 3:1 1:2\n", "unsorted")
    ordered = write(tmp_path, "-1 2:-5.2 5:2.5 15:1.5\n1 1:2 3:1\n", "ordered")
    assert_same(load_libsvm(unsorted, dtype="float64"), load_svmlight_file(ordered))
    X, _ = load_libsvm(os.path.join(SKLEARN_DATA, "svmlight_invalid_order.txt"))
    assert X.has_sorted_indices and list(X.indices) == [1, 4, 14]


def test_duplicate_index_raises_like_sklearn(tmp_path):
    for text in ["1 3:1 3:2\n", "1 5:1 3:1 5:2\n"]:
        path = write(tmp_path, "1 1:1\n" + text)
        with pytest.raises(ValueError):
            load_svmlight_file(path)
        with pytest.raises(ValueError, match=r"line 2: duplicate feature index"):
            load_libsvm(path)


def test_heart_scale_matches():
    for dtype in ["float32", "float64"]:
        assert_same(load_libsvm(HEART_SCALE, dtype=dtype),
                    load_svmlight_file(HEART_SCALE, dtype=np.dtype(dtype)))


def test_format_features_match_sklearn(tmp_path):
    text = ("# header comment\n"
            "\n"
            "1 qid:3 1:0.5 7:-2e3\r\n"
            "-1\t2:1.5\t\t4:.25 # trailing comment\n"
            "   \t \n"
            "0\n"                        # label-only row
            "+2.5 3:1E-3 10:-0 11:inf\r\n"
            "1 qid:4 5:1")               # no final newline
    path = write(tmp_path, text)
    for zero_based in ["auto", True, False]:
        assert_same(load_libsvm(path, dtype="float64", zero_based=zero_based),
                    load_svmlight_file(path, zero_based=zero_based))
    X, y = load_libsvm(path)
    assert X.shape == (5, 11) and list(y) == [1, -1, 0, 2.5, 1]


def test_multilabel_rows(tmp_path):
    path = write(tmp_path, "1,3 1:1\n2 2:2\n3:1 4:4\n3,1,2\n")
    assert_same(load_libsvm(path, multilabel=True, dtype="float64"),
                load_svmlight_file(path, multilabel=True), multilabel=True)
    _, y = load_libsvm(path, multilabel=True)
    assert y == [(1.0, 3.0), (2.0,), (), (1.0, 2.0, 3.0)]


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_compressed_files(tmp_path, opener, suffix):
    path = str(tmp_path / ("heart" + suffix))
    with open(HEART_SCALE, "rb") as src, opener(path, "wb") as dst:
        dst.write(src.read())
    assert_same(load_libsvm(path, dtype="float64"), load_svmlight_file(path))


def test_several_files_concatenate_like_load_svmlight_files(tmp_path):
    a = write(tmp_path, "1 1:1 3:2\n0 2:5\n", "a")
    b = write(tmp_path, "1 7:1\n", "b")
    X_a, y_a, X_b, y_b = load_svmlight_files([a, b])
    X, y = load_libsvm([a, b], dtype="float64")
    assert_same((X, y), (sp.vstack([X_a, X_b], format="csr"), np.concatenate([y_a, y_b])))
    # 'auto' is decided over all files: index 0 in one file makes every file zero-based.
    c = write(tmp_path, "1 0:1\n", "c")
    X, _ = load_libsvm([a, c])
    assert X.shape == (3, 4) and X[0].indices.tolist() == [1, 3]


def test_num_features(tmp_path):
    path = write(tmp_path, "1 1:1 3:2\n0 2:5\n")
    X, _ = load_libsvm(path, num_features=10)
    assert X.shape == (2, 10)
    X_ref, _ = load_svmlight_file(path, n_features=10)
    assert_same(load_libsvm(path, num_features=10, dtype="float64"), (X_ref, _))


def test_index_beyond_num_features_names_the_line(tmp_path):
    path = write(tmp_path, "1 1:1\n# comment\n\n0 2:5 4:1\n1 1:1\n")
    # The index is quoted as written in the file (one-based here).
    with pytest.raises(ValueError, match=r"data\.libsvm, line 4: feature index 4 is out of range "
                                         r"for num_features=3 \(indices are one-based"):
        load_libsvm(path, num_features=3)
    with pytest.raises(ValueError, match=r"line 4: feature index 4 is out of range"):
        load_libsvm(path, num_features=4, zero_based=True)


@pytest.mark.parametrize("text,zero_based,pattern", [
    ("1 1:1\n1 -3:2\n", "auto", r"line 2: invalid feature index in '-3:2': indices must not be negative"),
    ("1 1:1\n\n1 0:2\n", False, r"line 3: invalid feature index in '0:2': index 0 with zero_based=False"),
    ("1 1:1\n1 2:x\n", "auto", r"line 2: invalid feature value in '2:x'"),
    ("1 1:1\n1 a:1\n", "auto", r"line 2: invalid feature index in 'a:1'"),
    ("1 1:1\n1 1:1 7\n", "auto", r"line 2: invalid feature '7' \(expected index:value\)"),
    ("1 1:1\n1 qid:x 2:1\n", "auto", r"line 2: invalid query id 'qid:x'"),
    ("1e 1:1\n", "auto", r"line 1: invalid label '1e'"),
    ("1 99999999999999999999:1\n", "auto", r"line 1: feature index in '9+:1' is too large"),
])
def test_malformed_input_names_file_line_and_token(tmp_path, text, zero_based, pattern):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=r"data\.libsvm, " + pattern):
        load_libsvm(path, zero_based=zero_based)


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_libsvm(str(tmp_path / "absent.libsvm"))


def test_empty_file_gives_an_empty_dataset(tmp_path):
    for text in ["", "# only a comment\n\n"]:
        path = write(tmp_path, text)
        X, y = load_libsvm(path)
        X_ref, y_ref = load_svmlight_file(path)
        assert X.shape == X_ref.shape == (0, 1) and y.shape == y_ref.shape == (0,)


def test_parallel_parse_equals_single_thread_and_reports_the_first_error(tmp_path):
    rng = np.random.default_rng(0)
    block = []
    for i in range(4000):
        idx = np.sort(rng.choice(100000, size=rng.integers(0, 12), replace=False)) + 1
        block.append("%d %s" % (i % 3, " ".join("%d:%.6g" % (j, rng.normal()) for j in idx)))
    lines = block * 10  # about 3 MB: three parser threads
    path = write(tmp_path, "\n".join(lines) + "\n")
    reference = load_svmlight_file(path, dtype=np.float32)
    for threads in [1, 2, 5]:
        assert_same(load_libsvm(path, num_threads=threads), reference)
    lines[30000] = "1 5:oops"
    lines[35000] = "1 6:later"
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 30001: invalid feature value in '5:oops'"):
        load_libsvm(path, num_threads=4)


# Bytes that matter to the grammar, plus a few that Python's int()/float() treat specially.
_ALPHABET = b"0123456789 \t\r\n:#.,-+eEqidnaf_\x00\x0b\x0c\x1c\xa0x"
_lines = st.lists(st.sampled_from([b"1 1:1", b"2 qid:3 4:5 1:2", b"-1 0:1e-400", b"3,1 2:1e400",
                                   b"#c", b"", b"  \t", b"nan 3:-inf", b"1 10:1 2:2"])
                  | st.binary(max_size=12).map(lambda b: b), max_size=6)
_text = (st.lists(st.sampled_from(list(_ALPHABET)), max_size=60).map(bytes)
         | _lines.map(lambda parts: b"\n".join(parts))
         | st.binary(max_size=80))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_text, multilabel=st.booleans())
def test_fuzz_bytes_give_value_error_or_the_sklearn_result(tmp_path, text, multilabel):
    path = write(tmp_path, text, "fuzz")
    try:
        ours = load_libsvm(path, dtype="float64", multilabel=multilabel)
    except ValueError:
        ours = None
    try:
        reference = load_svmlight_file(io.BytesIO(text), multilabel=multilabel)
    except (ValueError, OverflowError):
        reference = None
    if ours is not None and reference is not None:
        assert_same(ours, reference, multilabel)
    elif ours is not None:
        # The one documented extension: rows with unsorted indices are sorted.
        with pytest.raises(ValueError):
            load_libsvm(path, dtype="float64", multilabel=multilabel, allow_unsorted=False)


def test_values_are_parsed_exactly_like_python_float(tmp_path):
    # The parser's fast path (short decimals) and its fallback (long mantissas,
    # large exponents, inf/nan, under/overflow) must both round as float() does.
    rng = np.random.default_rng(1)
    tokens = []
    for _ in range(4000):
        x = rng.standard_normal() * 10.0 ** rng.integers(-30, 30)
        tokens += ["%.*g" % (int(rng.integers(1, 18)), x), "%.*e" % (int(rng.integers(0, 20)), x),
                   "%.*f" % (int(rng.integers(0, 12)), x), repr(x)]
        digits = "".join(rng.choice(list("0123456789"), size=rng.integers(1, 25)))
        cut = rng.integers(0, len(digits) + 1)
        tokens.append(digits[:cut] + "." + digits[cut:] + ("e%d" % rng.integers(-330, 330)
                                                            if rng.random() < 0.5 else ""))
    tokens = [t for t in tokens if t not in (".",)]
    tokens += ["0", "-0", "+0.0", "1e308", "1e309", "-1e-400", "4.9e-324", "2.2250738585072011e-308",
               "inf", "-Infinity", "nan", "9007199254740993", "0.1", "123456789012345678901234567890"]
    text = "".join("1 1:%s\n" % t for t in tokens)
    X, _ = load_libsvm(write(tmp_path, text), dtype="float64", zero_based=False)
    expected = np.array([float(t) for t in tokens])
    assert X.shape[0] == len(tokens)
    values = np.zeros(len(tokens))
    values[np.diff(X.indptr) == 1] = X.data  # zeros are stored explicitly, so every row has one
    np.testing.assert_array_equal(values, expected)
    np.testing.assert_array_equal(np.signbit(values), np.signbit(expected))
    X32, _ = load_libsvm(write(tmp_path, text, "f32"), dtype="float32", zero_based=False)
    np.testing.assert_array_equal(X32.data, expected.astype(np.float32))


def test_large_random_bytes_on_several_threads_never_crash(tmp_path):
    # Several MB so that every parser thread gets a range; binary noise with
    # newlines, and valid lines with noise spliced in at random places.
    rng = np.random.default_rng(2)
    noise = rng.integers(0, 256, size=3 << 20, dtype=np.uint8)
    noise[rng.integers(0, noise.size, size=noise.size // 40)] = ord("\n")
    valid = b"".join(b"%d %d:%.3f %d:1\n" % (i % 2, i % 90 + 1, i / 7, i % 90 + 100)
                     for i in range(120000))
    spliced = bytearray(valid)
    for at in rng.integers(0, len(spliced), size=5):
        spliced[at] = int(rng.integers(0, 256))
    for text in [noise.tobytes(), bytes(spliced), valid[:-7]]:
        path = write(tmp_path, text, "noise")
        try:
            ours = load_libsvm(path, num_threads=4, dtype="float64")
        except ValueError as err:
            assert "noise, line " in str(err)
            continue
        try:
            reference = load_svmlight_file(path)
        except ValueError:
            continue  # one of the deliberate differences (unsorted rows, qid)
        assert_same(ours, reference)
    # The valid text cut mid-line: every row, values and labels, as scikit-learn reads them.
    path = write(tmp_path, valid[:-7], "cut")
    ours = load_libsvm(path, num_threads=4, dtype="float64")
    assert_same(ours, load_svmlight_file(path))
    assert ours[0].shape[0] == 120000


ZERO_BASED_TEXT = "1 0:1.5 3:2\n0 2:5\n"    # index 0 present: 'auto' keeps the indices
ONE_BASED_TEXT = "1 1:1.5 4:2\n0 3:5\n"     # no index 0: 'auto' shifts them down by one


@pytest.mark.parametrize("text, zero_based, expected", [
    (ZERO_BASED_TEXT, "auto", True), (ONE_BASED_TEXT, "auto", False),
    (ONE_BASED_TEXT, True, True), (ONE_BASED_TEXT, False, False), (ZERO_BASED_TEXT, True, True)])
def test_return_zero_based_reports_the_base_used(tmp_path, text, zero_based, expected):
    path = write(tmp_path, text)
    X, y, resolved = load_libsvm(path, zero_based=zero_based, return_zero_based=True)
    assert type(resolved) is bool and resolved is expected
    # The base reported is the one sklearn applies when told it explicitly.
    assert_same((X, y), load_svmlight_file(path, zero_based=resolved, dtype=np.float32))
    assert len(load_libsvm(path, zero_based=zero_based)) == 2  # default: (X, y) only


def test_return_zero_based_over_several_files_and_empty_ones(tmp_path):
    one_based = write(tmp_path, ONE_BASED_TEXT, "a")
    zero_based = write(tmp_path, ZERO_BASED_TEXT, "b")
    empty = write(tmp_path, "", "c")
    # scikit-learn's rule: one-based only if every file has a feature and none has index 0.
    assert load_libsvm([one_based, one_based], return_zero_based=True)[2] is False
    assert load_libsvm([one_based, zero_based], return_zero_based=True)[2] is True
    assert load_libsvm([one_based, empty], return_zero_based=True)[2] is True
    assert load_libsvm(HEART_SCALE, return_zero_based=True)[2] is False


# --------------------------------------------------------------- error messages


def gzip_cut(tmp_path, text, keep, name="data.libsvm.gz"):
    path = tmp_path / name
    path.write_bytes(gzip.compress(text)[:keep])
    return str(path)


ROWS = b"".join(b"%d 1:%d 3:0.5\n" % (i % 2, i) for i in range(30000))


@pytest.mark.parametrize("keep", [-8, -2000, 30])
def test_a_truncated_gz_names_the_file_and_position_in_load_libsvm(tmp_path, keep):
    compressed = gzip.compress(ROWS)
    path = gzip_cut(tmp_path, ROWS, len(compressed) + keep if keep < 0 else keep)
    with pytest.raises(ValueError, match=r"data\.libsvm\.gz, line \d+: compressed data ends early "
                                         r"\(truncated\?\) after \d+ bytes of text") as info:
        load_libsvm(path)
    assert isinstance(info.value.__cause__, EOFError)


def test_a_truncated_gz_names_a_line_near_the_damage(tmp_path):
    """The text decompressed before the failure is kept: the line was that of the last
    whole MiB read (line 1 for any smaller file)."""
    compressed = gzip.compress(ROWS)
    path = gzip_cut(tmp_path, ROWS, len(compressed) - 20)
    with pytest.raises(ValueError, match=r"line (\d+):") as info:
        load_libsvm(path)
    line = int(info.value.args[0].split("line ")[1].split(":")[0])
    assert 25000 < line <= 30000


@pytest.mark.parametrize("make", ["fifo", "device"])
def test_a_pipe_or_device_is_refused_by_name(tmp_path, make):
    """Their size is 0: they read as an empty file, and a second read (the line of an
    error) would block on a FIFO."""
    if make == "fifo":
        path = str(tmp_path / "data.fifo")
        os.mkfifo(path)
    else:
        path = os.devnull
    for read in (load_libsvm, LibSVMDataset, lambda p: locate_row(p, 0)):
        with pytest.raises(ValueError, match=r"%s is a %s, not a regular file"
                           % (path.replace(".", r"\."), "pipe" if make == "fifo" else "device")):
            read(path)


def test_a_truncated_gz_names_the_file_and_line_in_the_stream(tmp_path):
    compressed = gzip.compress(ROWS)
    path = gzip_cut(tmp_path, ROWS, len(compressed) * 2 // 3)
    stream = LibSVMStream(path, batch_size=100, num_features=4, chunk_bytes=4096, prefetch=0)
    batches = 0
    with pytest.raises(ValueError, match=r"data\.libsvm\.gz, line (\d+): compressed data ends "
                                         r"early") as info:
        for _ in stream:
            batches += 1
    # The line named is past the rows already yielded, and within the file.
    line = int(info.value.args[0].split("line ")[1].split(":")[0])
    assert batches * 100 < line <= 30000
    assert isinstance(info.value.__cause__, EOFError)


def test_a_corrupt_bz2_names_the_file(tmp_path):
    raw = bytearray(bz2.compress(ROWS))
    raw[len(raw) // 2] ^= 0xFF
    path = write(tmp_path, bytes(raw), "data.libsvm.bz2")
    with pytest.raises(ValueError, match=r"data\.libsvm\.bz2, line \d+: compressed data"):
        load_libsvm(path)


def test_index_2_63_minus_1_zero_based_is_a_value_error_naming_the_line(tmp_path):
    path = write(tmp_path, "1 1:1\n# note\n0 9223372036854775807:2\n")
    with pytest.raises(OverflowError):  # scikit-learn's behaviour, for the record
        load_svmlight_file(path, zero_based=True)
    for zero_based in (True, "auto"):
        if zero_based == "auto":
            path = write(tmp_path, "1 0:1\n# note\n0 9223372036854775807:2\n", "auto")
        with pytest.raises(ValueError, match=r"line 3: feature index 9223372036854775807 is too "
                                             r"large.*2\^63 columns"):
            load_libsvm(path, zero_based=zero_based)
    # One-based, the same index fits: 2^63 - 1 columns.
    X, _ = load_libsvm(write(tmp_path, "0 9223372036854775807:2\n", "one"), zero_based=False)
    assert X.shape == (1, 2 ** 63 - 1) and X.indices.tolist() == [2 ** 63 - 2]


def test_nan_and_inf_are_read_as_scikit_learn_reads_them(tmp_path):
    path = write(tmp_path, "1 1:nan 2:1\n# c\n\ninf 2:-inf\n0 3:NaN\n")
    X_ref, y_ref = load_svmlight_file(path)  # the reference accepts them
    X, y = load_libsvm(path, dtype="float64")
    assert X.shape == X_ref.shape
    np.testing.assert_array_equal(X.indptr, X_ref.indptr)
    np.testing.assert_array_equal(X.indices, X_ref.indices)
    np.testing.assert_array_equal(X.data, X_ref.data)  # nan == nan for assert_array_equal
    np.testing.assert_array_equal(y, y_ref)
    with pytest.raises(ValueError, match=r"data\.libsvm, line 1: non-finite value nan of feature 1"):
        load_libsvm(path, allow_nonfinite=False)
    finite_rows = write(tmp_path, "1 1:1\n# c\n\ninf 2:1\n", "label")
    with pytest.raises(ValueError, match=r"label, line 4: non-finite label inf"):
        load_libsvm(finite_rows, allow_nonfinite=False)
    X, _ = load_libsvm(write(tmp_path, "1 1:1\n", "ok"), allow_nonfinite=False)
    assert X.toarray().tolist() == [[1.0]]


def test_locate_row_names_the_file_and_line_of_every_row(tmp_path):
    texts = ["# header\n1 1:1\n\n0 2:1\n", "", "   \n1 3:nan # odd\n1 1:2"]
    paths = [write(tmp_path, text, "f%d" % i) for i, text in enumerate(texts)]
    X, y = load_libsvm(paths)
    expected = [(paths[0], 2), (paths[0], 4), (paths[2], 2), (paths[2], 3)]
    assert [locate_row(paths, row) for row in range(X.shape[0])] == expected
    assert locate_row(paths, -1) == expected[-1]
    # What a caller does with an estimator's "Input X contains NaN":
    row = int(np.flatnonzero(np.isnan(X.sum(axis=1).A1))[0])
    assert LibSVMDataset(paths).locate(row) == (paths[2], 2)
    with pytest.raises(IndexError, match="row 4 is out of range"):
        locate_row(paths, 4)


def test_invalid_bytes_are_escaped_once_in_messages(tmp_path):
    path = write(tmp_path, b"1 1:1\n0 2:\xfc\x01\n")
    with pytest.raises(ValueError) as info:
        load_libsvm(path)
    message = str(info.value)
    assert message.endswith("line 2: invalid feature value in '2:\\xfc\\x01' (expected a number)")
    assert "\\\\" not in message  # no doubled backslash


# --------------------------------------------------------------- threads by work


def test_small_buffers_are_parsed_serially_and_large_ones_by_a_team_bounded_by_work():
    assert team_size(0, 8) == 1
    assert team_size(10_000, 8) == 1            # a test file, a stream's small chunk
    grain = next(n for n in (2 ** k for k in range(10, 30)) if team_size(n, 64) == 1
                 and team_size(2 * n, 64) == 2)
    assert team_size(grain - 1, 64) == 1
    assert team_size(5 * grain, 64) == 5        # no more threads than bytes / grain
    assert team_size(5 * grain, 3) == 3         # nor than allowed
    assert team_size(10 ** 12, 1000) == 256


def test_serial_and_parallel_paths_give_identical_results():
    rng = np.random.default_rng(5)
    lines = []
    for i in range(60000):
        idx = rng.choice(5000, size=int(rng.integers(0, 12)), replace=False)  # unsorted rows too
        lines.append("%s %s # r%d\n" % (rng.standard_normal(), " ".join(
            "%d:%r" % (j, float(v)) for j, v in zip(idx, rng.standard_normal(idx.size))), i))
    text = "".join(lines).encode()
    assert team_size(len(text), 4) >= 2
    serial = parse_libsvm_bytes(text, dtype="float64", num_threads=1)
    parallel = parse_libsvm_bytes(text, dtype="float64", num_threads=4)
    for name in ("values", "indices", "indptr", "labels"):
        np.testing.assert_array_equal(getattr(serial, name), getattr(parallel, name))
    assert (serial.min_index, serial.max_index) == (parallel.min_index, parallel.max_index)
    # An error in the last thread's range is reported the same way on both paths.
    broken = text + b"1 7:x\n"
    messages = []
    for threads in (1, 4):
        with pytest.raises(ValueError) as info:
            parse_libsvm_bytes(broken, num_threads=threads, source="t")
        messages.append(str(info.value))
    assert messages[0] == messages[1] == "t, line 60001: invalid feature value in '7:x' " \
        "(expected a number)"


@pytest.mark.parametrize("paths", [None, 123, [None]])
def test_a_path_that_is_no_path_is_named(paths):
    with pytest.raises(TypeError, match="expected a path .* got (NoneType|int)"):
        load_libsvm(paths)


@pytest.mark.parametrize("value", [0, 1, 0.0, "true", None])
def test_zero_based_other_than_a_bool_or_auto_is_refused_by_every_reader(tmp_path, value):
    """0 and 1 used to mean opposite things in different readers (load_libsvm took 0 as
    zero-based, LibSVMStream as one-based); scikit-learn refuses them too."""
    from gluon_sparse.data import load_multilabel
    path = tmp_path / "f.svm"
    path.write_text("1 1:2 3:4\n0 2:1\n")
    readers = [lambda: load_libsvm(str(path), zero_based=value),
               lambda: LibSVMDataset(str(path), zero_based=value),
               lambda: load_multilabel(str(path), zero_based=value),
               lambda: LibSVMStream(str(path), batch_size=1, num_features=4,
                                    zero_based=value)]
    for read in readers:
        with pytest.raises(ValueError, match="zero_based must be True, False"):
            read()


@pytest.mark.parametrize("value", [False, True])
def test_numpy_bool_zero_based_reads_as_the_bool(tmp_path, value):
    from gluon_sparse.data import load_multilabel
    path = tmp_path / "f.svm"
    path.write_text("1 1:2 3:4\n0 2:1\n")
    expected = load_svmlight_file(str(path), zero_based=value, n_features=4)[0].toarray()
    X, _ = load_libsvm(str(path), zero_based=np.bool_(value), num_features=4)
    np.testing.assert_array_equal(X.toarray(), expected)
    dataset = LibSVMDataset(str(path), zero_based=np.bool_(value), num_features=4,
                            cache=str(tmp_path / "cache"))  # the options go into JSON
    np.testing.assert_array_equal(dataset.data.toarray(), expected)
    assert dataset.zero_based_ is value
    X, _ = load_multilabel(str(path), zero_based=np.bool_(value), num_features=4)
    np.testing.assert_array_equal(X.toarray(), expected)
    batch = next(iter(LibSVMStream(str(path), batch_size=2, num_features=4,
                                   zero_based=np.bool_(value), prefetch=0)))[0]
    np.testing.assert_array_equal(batch.asnumpy(), expected)


def test_stacked_row_pointers_do_not_wrap_past_int32():
    """Several files whose non-zeros together pass 2^31 - 1: each file's int32 row pointers
    plus the offset of the files before it (NumPy < 2 kept the sum in int32)."""
    from gluon_sparse.data.libsvm import _stacked_indptr
    blocks = [np.array([0, 1_500_000_000], dtype=np.int32),
              np.array([0, 1_000_000_000, 2_000_000_000], dtype=np.int32)]
    indptr = _stacked_indptr(blocks, np.int64)
    assert indptr.dtype == np.int64
    assert indptr.tolist() == [0, 1_500_000_000, 2_500_000_000, 3_500_000_000]


def test_a_negative_index_beyond_int64_is_named_negative(tmp_path):
    path = tmp_path / "f.svm"
    path.write_text("1 -99999999999999999999:1\n")
    with pytest.raises(ValueError, match="line 1: .*indices must not be negative"):
        load_libsvm(str(path))
    path.write_text("1 99999999999999999999:1\n")
    with pytest.raises(ValueError, match="line 1: .*too large"):
        load_libsvm(str(path))


@pytest.mark.parametrize("size", [2 ** 63, 2 ** 80])
def test_a_size_past_int64_is_named(tmp_path, size):
    # scipy raised a bare OverflowError ("Python int too large to convert to C long").
    from gluon_sparse.data import load_multilabel
    path = tmp_path / "a.svm"
    path.write_text("1 1:1\n")
    with pytest.raises(ValueError, match="num_features=%d is too large" % size):
        load_libsvm(str(path), num_features=size)
    with pytest.raises(ValueError, match="num_labels=%d is too large" % size):
        load_multilabel(str(path), num_labels=size)


def test_parse_libsvm_bytes_reads_any_numpy_view_as_its_bytes_in_order():
    """A reversed view made the parser read past the buffer's end (its address is the
    last element's), and a uint16 view had only half its bytes read."""
    text = b"1 1:2\n0 2:3\n"
    want = parse_libsvm_bytes(text)
    wide = np.frombuffer(text, dtype=np.uint16)  # 12 bytes as 6 elements
    got = parse_libsvm_bytes(wide)
    assert got.num_rows == 2
    np.testing.assert_array_equal(got.values, want.values)
    backwards = np.frombuffer(text[::-1], dtype=np.uint8)[::-1]  # the text, negative stride
    got = parse_libsvm_bytes(backwards)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.labels, want.labels)
