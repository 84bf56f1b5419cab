"""Processes that save models while the fault tests kill them (tests/test_faults_model_dir.py).

Run as ``python tests/model_dir_worker.py MODE ARGS`` with the repository on
PYTHONPATH. The estimators come pickled; they are only unpickled here, so that
no MXNet computation has run before a fork.

``alternate A.pkl B.pkl DIR``
    Save A, B, A, ... to DIR until killed; prints ``ready`` after the first save.
``kill PLAN.json``
    For each entry of the plan, fork a process that saves to the entry's
    directory and is SIGKILLed: by this process after a random delay while it
    saves A and B alternately (``"stage": null``), or by itself at the commit
    point ``stage`` of its first save (via ``gluon_sparse._fileio._fault_hook``).
    Prints one line per entry: the directory and how the process ended.
"""
import json
import os
import pickle
import random
import signal
import sys
import time

from gluon_sparse import _fileio


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def alternate(path_a, path_b, directory):
    models = [_load(path_a), _load(path_b)]
    models[0].save(directory)
    print("ready", flush=True)
    i = 1
    while True:
        models[i % 2].save(directory)
        i += 1


def _saver(models, directory, stage):
    if stage is not None:
        def die_at(reached):
            if reached == stage:
                os.kill(os.getpid(), signal.SIGKILL)
        _fileio._fault_hook = die_at
        models[1].save(directory)
    else:
        i = 1
        while True:
            models[i % 2].save(directory)
            i += 1
    os._exit(3)  # the hook did not fire: the parent reports it


def kill(plan_path):
    with open(plan_path) as f:
        plan = json.load(f)
    models = [_load(plan["a"]), _load(plan["b"])]
    rng = random.Random(plan["seed"])
    for entry in plan["entries"]:
        pid = os.fork()
        if pid == 0:
            try:
                _saver(models, entry["dir"], entry["stage"])
            finally:
                os._exit(4)
        if entry["stage"] is None:
            time.sleep(rng.uniform(0.05, entry["max_delay"]))
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        how = ("killed" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
               else "exit %d" % os.WEXITSTATUS(status))
        print(json.dumps({"dir": entry["dir"], "end": how}), flush=True)


if __name__ == "__main__":
    {"alternate": alternate, "kill": kill}[sys.argv[1]](*sys.argv[2:])
