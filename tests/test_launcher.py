"""The process launcher: arguments, process layout, ssh command lines, failure handling."""
import argparse
import io
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest

from gluon_sparse.distributed import launcher

PYTHON = sys.executable


def parse(argv):
    return launcher.add_arguments(argparse.ArgumentParser()).parse_args(argv)


def test_add_arguments_parses_the_contract_options():
    args = parse(["-n", "3", "-s", "2", "--hosts", "h.txt", "--timeout", "7.5", "--",
                  "python", "train.py", "--lr", "0.1"])
    assert (args.num_workers, args.num_servers, args.hosts, args.timeout) == (3, 2, "h.txt", 7.5)
    assert args.command[-4:] == ["python", "train.py", "--lr", "0.1"]
    defaults = parse(["--num-workers", "1", "--", "cmd"])
    assert defaults.num_servers == 1 and defaults.hosts is None and defaults.timeout is None
    for bad in (["--timeout", "-5"], ["--timeout", "nan"], ["--grace-period", "-1"]):
        with pytest.raises(SystemExit):
            parse(["-n", "1"] + bad + ["--", "cmd"])


def test_a_port_in_use_is_named(caplog):
    with socket.socket() as taken:
        taken.bind((launcher.LOOPBACK, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = launcher.run(parse(["-n", "1", "--port", str(port), "--", PYTHON, "-c", "pass"]),
                            output=io.StringIO())
    assert code == 2
    assert any("--port %d: the scheduler cannot listen there" % port in r.getMessage()
               for r in caplog.records)


def test_local_processes_get_the_dmlc_environment_on_loopback():
    processes = launcher.build_processes(2, 1, ["python", "train.py"], port=9123)
    assert [p.name for p in processes] == ["scheduler", "server 0", "worker 0", "worker 1"]
    for proc in processes:
        assert proc.host is None
        assert proc.env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
        assert proc.env["DMLC_NODE_HOST"] == "127.0.0.1"
        assert proc.env["DMLC_PS_ROOT_PORT"] == "9123"
        assert (proc.env["DMLC_NUM_WORKER"], proc.env["DMLC_NUM_SERVER"]) == ("2", "1")
        assert proc.env["DMLC_ROLE"] == proc.role
    workers = [p for p in processes if p.role == "worker"]
    assert [p.env["DMLC_WORKER_ID"] for p in workers] == ["0", "1"]
    assert all(p.argv == ["python", "train.py"] for p in workers)
    assert processes[1].argv[-1] == launcher.SERVER_SCRIPT
    assert processes[1].argv[-1].endswith(os.path.join("gluon_sparse", "distributed", "server.py"))


def test_local_processes_share_the_cores_between_openmp_pools(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    processes = launcher.build_processes(3, 1, ["python", "train.py"], port=9123)
    threads = {p.name: p.env["OMP_NUM_THREADS"] for p in processes}
    assert threads == {"scheduler": "1", "server 0": "1", "worker 0": "2", "worker 1": "2",
                       "worker 2": "2"}
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    worker = launcher.build_processes(3, 1, ["python"], port=9123)[-1]
    assert "OMP_NUM_THREADS" not in worker.env  # the user's setting is inherited


@pytest.mark.parametrize("workers, servers, command, match", [
    (0, 1, ["x"], "--num-workers must be at least 1"),
    (1, 0, ["x"], "--num-servers must be at least 1"),
    (1, 1, [], "no worker command given"),
])
def test_bad_layouts_are_refused(workers, servers, command, match):
    with pytest.raises(ValueError, match=match):
        launcher.build_processes(workers, servers, command, port=9000)


def test_read_hosts_skips_comments_and_names_bad_lines(tmp_path):
    good = tmp_path / "hosts"
    good.write_text("# cluster\nnode1\n\nalice@node2:2222  # second\n")
    assert launcher.read_hosts(str(good)) == ["node1", "alice@node2:2222"]
    bad = tmp_path / "bad"
    bad.write_text("node1\nnode2 node3\n")
    with pytest.raises(ValueError, match=r"bad:2: expected one \[user@\]host\[:port\]"):
        launcher.read_hosts(str(bad))
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="lists no hosts"):
        launcher.read_hosts(str(empty))


def test_ssh_command_lines_place_processes_round_robin():
    hosts = ["node1", "bob@node2:2200"]
    processes = launcher.build_processes(3, 2, ["python", "train.py", "--data", "a b"],
                                         port=9500, hosts=hosts, cwd="/shared/job",
                                         python="/opt/py/bin/python")
    placement = {p.name: p.host for p in processes}
    assert placement == {"scheduler": "node1", "server 0": "node1", "server 1": "bob@node2:2200",
                         "worker 0": "node1", "worker 1": "bob@node2:2200", "worker 2": "node1"}
    worker1 = next(p for p in processes if p.name == "worker 1")
    assert worker1.argv[:6] == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                                "-p"]
    assert worker1.argv[6:8] == ["2200", "bob@node2"]
    remote = shlex.split(worker1.argv[-1])
    assert remote[:3] == ["cd", "/shared/job", "&&"]
    assert remote[3] == "env"
    assignments = dict(a.split("=", 1) for a in remote[4:] if "=" in a)
    assert assignments["DMLC_ROLE"] == "worker"
    assert assignments["DMLC_PS_ROOT_URI"] == "node1"  # the scheduler's host
    assert assignments["DMLC_PS_ROOT_PORT"] == "9500"
    assert assignments["DMLC_WORKER_ID"] == "1"
    assert "DMLC_NODE_HOST" not in assignments  # remote nodes find their own address
    assert remote[-4:] == ["python", "train.py", "--data", "a b"]
    server = next(p for p in processes if p.name == "server 1")
    assert shlex.split(server.argv[-1])[-2:] == ["/opt/py/bin/python", launcher.SERVER_SCRIPT]


def run_launcher(argv):
    out = io.StringIO()
    code = launcher.run(parse(argv), output=out)
    return code, out.getvalue()


def test_output_is_forwarded_with_rank_prefixes():
    code, out = run_launcher(["-n", "2", "--grace-period", "1", "--timeout", "60", "--", PYTHON,
                              "-c", "import os; print('hello from', os.environ['DMLC_WORKER_ID'])"])
    assert code == 0
    assert "[worker 0] hello from 0" in out.splitlines()
    assert "[worker 1] hello from 1" in out.splitlines()


def test_failing_worker_stops_the_job_and_gives_its_exit_code(caplog):
    script = ("import os, sys, time\n"
              "if os.environ['DMLC_WORKER_ID'] == '1':\n"
              "    sys.exit(3)\n"
              "time.sleep(60)\n")
    start = time.monotonic()
    code, _ = run_launcher(["-n", "2", "--grace-period", "1", "--", PYTHON, "-c", script])
    assert code == 3
    assert time.monotonic() - start < 30
    assert any("worker 1" in r.getMessage() and "exited with code 3" in r.getMessage()
               for r in caplog.records)


def test_timeout_stops_everything_with_code_124(caplog):
    code, _ = run_launcher(["-n", "1", "--timeout", "1", "--grace-period", "1", "--", PYTHON,
                            "-c", "import time; time.sleep(60)"])
    assert code == launcher.TIMEOUT_EXIT_CODE
    assert any("timed out after 1 s" in r.getMessage() for r in caplog.records)


def test_a_worker_that_leaves_long_before_the_others_is_named(caplog):
    """Workers of a dist_* job leave together; one that left early (it never joined the
    kvstore) leaves the others waiting for it, which the launcher now says."""
    script = ("import os, time\n"
              "if os.environ['DMLC_WORKER_ID'] == '0':\n"
              "    time.sleep(4)\n")
    code, _ = run_launcher(["-n", "2", "--grace-period", "1", "--", PYTHON, "-c", script])
    assert code == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("worker 1 finished 1 s ago while other workers still run")
               for m in messages)
    assert any("did a worker train with another kvstore?" in m for m in messages)


def test_missing_command_is_reported():
    code, _ = run_launcher(["-n", "1", "--grace-period", "1", "--",
                            "/nonexistent/gluon-sparse-worker"])
    assert code == 127


def test_main_rejects_an_unreadable_hosts_file(tmp_path, caplog):
    assert launcher.main(["-n", "1", "--hosts", str(tmp_path / "missing"), "--", "x"]) == 2
    assert any("missing" in r.getMessage() for r in caplog.records)


def descendants(pid):
    """Live descendants of ``pid``, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_killing_a_worker_ends_a_dist_sync_job_with_nothing_left_running():
    # A real dist_sync job (scheduler, server, two workers in the kvstore): once a
    # worker dies the others block in ps-lite forever, so the launcher must end them.
    worker = ("import os, time, mxnet as mx\n"
              "kv = mx.kv.create('dist_sync')\n"
              "print('ready', os.getpid(), flush=True)\n"
              "time.sleep(300)\n")
    launch = subprocess.Popen(
        [PYTHON, "-m", "gluon_sparse.distributed.launcher", "-n", "2", "-s", "1",
         "--grace-period", "2", "--timeout", "200", "--", PYTHON, "-c", worker],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready = {}
        deadline = time.monotonic() + 120  # four processes import MXNet on 2 shared cores
        while len(ready) < 2 and time.monotonic() < deadline:
            line = launch.stdout.readline()
            if not line:
                break
            if "] ready " in line:
                name, _, rest = line.partition("] ready ")
                ready[name.lstrip("[")] = int(rest)
        assert len(ready) == 2, "workers did not start: %s" % launch.communicate(timeout=30)[1]
        job = descendants(launch.pid)
        assert len(job) >= 4  # scheduler, server, two workers
        killed_at = time.monotonic()
        os.kill(ready["worker 1"], signal.SIGKILL)
        _, stderr = launch.communicate(timeout=30)
        assert time.monotonic() - killed_at < 15
        assert launch.returncode == 128 + signal.SIGKILL
        assert "worker 1" in stderr and "killed by SIGKILL" in stderr
        assert [pid for pid in job if alive(pid)] == []
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()


@pytest.mark.slow
def test_a_worker_that_raises_ends_a_dist_sync_job_with_its_error():
    """MXNet's kvstore holds a worker that raised at exit, waiting for the others, which
    wait for it: the job hung with no code. A gluon-sparse worker exits after a grace."""
    worker = ("import time, mxnet as mx, gluon_sparse\n"
              "kv = mx.kv.create('dist_sync')\n"
              "if kv.rank == 1:\n"
              "    raise RuntimeError('a bug in rank 1')\n"
              "kv.init(0, mx.nd.zeros((2,)))\n"
              "while True:\n"
              "    kv.push(0, mx.nd.ones((2,))); out = mx.nd.zeros((2,))\n"
              "    kv.pull(0, out=out); out.wait_to_read(); time.sleep(0.05)\n")
    env = dict(os.environ, GLUON_SPARSE_WORKER_EXIT_GRACE="3")
    launch = subprocess.Popen(
        [PYTHON, "-m", "gluon_sparse.distributed.launcher", "-n", "2", "-s", "1",
         "--grace-period", "2", "--timeout", "200", "--", PYTHON, "-c", worker],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=env)
    try:
        out, err = launch.communicate(timeout=180)
        assert launch.returncode == 1, (out[-2000:], err[-2000:])
        assert "RuntimeError: a bug in rank 1" in out + err
        assert "exited with code 1" in err
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()


def test_the_exit_watchdog_is_armed_in_workers_only(monkeypatch):
    from gluon_sparse import _worker_exit
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    monkeypatch.delenv("DMLC_ROLE", raising=False)
    _worker_exit.install()
    assert sys.excepthook is sys.__excepthook__
    monkeypatch.setenv("DMLC_ROLE", "worker")
    monkeypatch.setenv(_worker_exit.GRACE_VARIABLE, "-1")
    _worker_exit.install()
    _worker_exit.install()  # once only
    assert sys.excepthook._gluon_sparse and _worker_exit._grace() == 30.0
    monkeypatch.setenv(_worker_exit.GRACE_VARIABLE, "2.5")
    assert _worker_exit._grace() == 2.5


def wait_for_lines(stream, marker, count, timeout):
    found = []
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        if marker in line:
            found.append(line)
    return found


@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_every_process():
    worker = "import time; print('ready', flush=True); time.sleep(300)"
    launch = subprocess.Popen(
        [PYTHON, "-m", "gluon_sparse.distributed.launcher", "-n", "2", "--grace-period", "2",
         "--", PYTHON, "-c", worker],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert len(wait_for_lines(launch.stdout, "] ready", 2, timeout=120)) == 2
        job = descendants(launch.pid)
        assert len(job) >= 4
        launch.send_signal(signal.SIGTERM)
        _, stderr = launch.communicate(timeout=30)
        assert launch.returncode == 128 + signal.SIGTERM
        assert "received SIGTERM" in stderr
        assert [pid for pid in job if alive(pid)] == []
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()


def wait_until_gone(pids, timeout):
    """Poll /proc until none of ``pids`` is alive (or ``timeout``); return the survivors."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    return left


# A worker with a child of its own (not covered by PR_SET_PDEATHSIG, which fork clears).
WORKER_WITH_GRANDCHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "print('ready', child.pid, flush=True)\n"
    "time.sleep(300)\n")


@pytest.mark.slow
def test_sigkill_to_the_launcher_leaves_no_process_running():
    # Scheduler and server are the real ones (server.py, importing MXNet); each
    # worker also has a grandchild. None of them may outlive a SIGKILLed launcher.
    launch = subprocess.Popen(
        [PYTHON, "-m", "gluon_sparse.distributed.launcher", "-n", "2", "-s", "1",
         "--grace-period", "2", "--", PYTHON, "-c", WORKER_WITH_GRANDCHILD],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    job = []
    try:
        ready = wait_for_lines(launch.stdout, "] ready", 2, timeout=120)
        assert len(ready) == 2, launch.stderr.read() if launch.poll() is not None else ready
        job = descendants(launch.pid)
        grandchildren = [int(line.split()[-1]) for line in ready]
        assert set(grandchildren) <= set(job)
        assert len(job) >= 6  # scheduler, server, 2 workers, 2 grandchildren (+ watchdog)
        launch.kill()
        launch.wait()
        assert wait_until_gone(job, timeout=60) == []
    finally:
        for pid in job:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if launch.poll() is None:
            launch.kill()
            launch.wait()


def test_watchdog_kills_the_groups_it_watches_only_when_the_pipe_ends_without_done():
    from gluon_sparse.distributed._lifeline import Watchdog
    sleepers = [subprocess.Popen([PYTHON, "-c", "import time; time.sleep(300)"],
                                 start_new_session=True) for _ in range(3)]
    try:
        # A normal end ('done'): the watched group is left alone.
        calm = Watchdog()
        calm.watch(sleepers[0].pid)
        calm.close()
        # A launcher that dies: the pipe ends without 'done'; a forgotten group is spared.
        orphaned = Watchdog()
        orphaned.watch(sleepers[1].pid)
        orphaned.watch(sleepers[2].pid)
        orphaned.forget(sleepers[2].pid)
        orphaned._pipe.close()
        orphaned._process.wait(timeout=30)
        assert sleepers[1].wait(timeout=30) == -signal.SIGKILL
        assert sleepers[0].poll() is None and sleepers[2].poll() is None
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


@pytest.mark.parametrize("port", [70000, -5])
def test_a_port_out_of_range_is_a_bad_argument(caplog, port):
    """bind() raised OverflowError before the range check: a traceback and status 1."""
    code = launcher.run(parse(["-n", "1", "--port", str(port), "--", PYTHON, "-c", "pass"]),
                        output=open(os.devnull, "w"))
    assert code == 2
    assert any("scheduler port must be in 1..65535, got %d" % port in r.getMessage()
               for r in caplog.records)


def test_a_host_line_without_a_host_name_is_named(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1\nalice@\n")
    with pytest.raises(ValueError, match=r"hosts:2: expected one \[user@\]host\[:port\]"):
        launcher.read_hosts(str(hosts))
