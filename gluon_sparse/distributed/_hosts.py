"""Remote hosts of a launched job: the hosts file and the ssh command lines."""
import shlex

__all__ = ["read_hosts", "host_address", "ssh_command"]


def read_hosts(path):
    """Read a hosts file: one ``[user@]host[:port]`` per line, ``#`` starts a comment.

    Parameters
    ----------
    path : str
        The file.

    Returns
    -------
    list of str
        Hosts, in file order.

    Raises
    ------
    ValueError
        For a malformed line (naming the file and line) or a file without hosts.
    """
    hosts = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            entry = line.split("#", 1)[0].strip()
            if not entry:
                continue
            host, _, port = entry.partition(":")
            # The address is what follows the last '@' ('alice@' names none).
            if (len(entry.split()) != 1 or not host.rsplit("@", 1)[-1]
                    or (port and not port.isdigit())):
                raise ValueError("%s:%d: expected one [user@]host[:port] per line, got %r"
                                 % (path, lineno, line.rstrip("\n")))
            hosts.append(entry)
    if not hosts:
        raise ValueError("%s lists no hosts" % path)
    return hosts


def host_address(host):
    """The address part of ``[user@]host[:port]``."""
    return host.rsplit("@", 1)[-1].split(":", 1)[0]


def ssh_command(host, env, command, cwd):
    """The ssh command line running ``command`` with ``env`` in ``cwd`` on ``host``.

    Parameters
    ----------
    host : str
        ``[user@]host[:port]``.
    env : dict of str to str
        Environment variables to set for the remote command.
    command : list of str
        The remote command.
    cwd : str
        Remote working directory.

    Returns
    -------
    list of str
        ``ssh`` argv; the remote part is one shell-quoted string.

    Examples
    --------
    >>> ssh_command('alice@node1:2222', {'DMLC_ROLE': 'worker'}, ['python', 'a b.py'], '/job')
    ['ssh', '-o', 'BatchMode=yes', '-o', 'StrictHostKeyChecking=no', '-p', '2222', 'alice@node1', "cd /job && env DMLC_ROLE=worker python 'a b.py'"]
    """
    destination, _, port = host.partition(":")
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    if port:
        argv += ["-p", port]
    assignments = ["%s=%s" % (key, shlex.quote(str(value))) for key, value in sorted(env.items())]
    remote = "cd %s && env %s %s" % (shlex.quote(cwd), " ".join(assignments),
                                     " ".join(shlex.quote(part) for part in command))
    return argv + [destination, remote]
