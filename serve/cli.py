"""`rafka serve ...` verbs (a `rafka.commands` entry point, pyproject.toml): the HTTP gateway on the started cluster.

    rafka serve start [--port 8082] [--host 127.0.0.1] [--acks all] [--replicas 1] [--body-timeout-s 30]
    rafka serve status
    rafka serve stop

``start`` attaches to the cluster like every other verb (``--address``, ``RAY_ADDRESS`` or the one
``rafka cluster start`` recorded) and deploys the gateway on that Ray cluster's Serve, which is detached:
the gateway keeps running after the command returns, until ``rafka serve stop`` (or the cluster stops).
Ray Serve and FastAPI are imported only when one of these verbs runs.
"""

from __future__ import annotations


def cmd_serve_start(args) -> int:
    import sys

    from ray.serve.exceptions import RayServeException

    from rafka.cli.support import EXIT_ERROR, EXIT_OK, connect, print_result
    from serve.gateway import start_gateway

    handle = connect(args)
    try:
        url = start_gateway(
            handle,
            host=args.host,
            port=args.port,
            acks=args.acks,
            num_replicas=args.replicas,
            body_timeout_s=args.body_timeout_s,
        )
    except (RuntimeError, RayServeException) as exc:  # port taken, Serve elsewhere, deployment failed
        print(f"rafka: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return EXIT_ERROR
    info = {
        "url": url,
        "docs": f"{url}/docs",
        "openapi": f"{url}/openapi.json",
        "cluster": handle.name,
        "acks": args.acks,
        "replicas": args.replicas,
    }
    print_result(
        args,
        info,
        f"rafka HTTP gateway for cluster {handle.name!r} listening on {url}\n"
        f"  API docs      {url}/docs\n  OpenAPI       {url}/openapi.json\n"
        "Stop it with: rafka serve stop",
    )
    return EXIT_OK


def cmd_serve_status(args) -> int:
    from rafka.cli.support import EXIT_ERROR, EXIT_OK, connect, print_result
    from serve.gateway import gateway_status

    connect(args)
    st = gateway_status()
    if st is None:
        print_result(args, {"running": False}, "the rafka HTTP gateway is not running on this cluster")
        return EXIT_ERROR
    st["running"] = True
    deps = ", ".join(f"{d} {s}" for d, s in sorted(st["deployments"].items()))
    print_result(
        args, st, f"rafka HTTP gateway {st['status']} at {st['url']} (docs {st['url']}/docs)\n  deployments   {deps}"
    )
    return EXIT_OK


def cmd_serve_stop(args) -> int:
    from rafka.cli.support import EXIT_OK, connect, print_result
    from serve.gateway import stop_gateway

    connect(args)
    deleted = stop_gateway()
    print_result(
        args,
        {"stopped": deleted},
        "stopped the rafka HTTP gateway" if deleted else "the rafka HTTP gateway was not running",
    )
    return EXIT_OK


def register(groups, common) -> None:
    """Add ``rafka serve {start,status,stop}`` to the CLI's subcommand ``groups``."""
    sv = groups.add_parser("serve", help="the HTTP gateway (Ray Serve, Confluent REST Proxy API)").add_subparsers(
        dest="verb", required=True
    )
    s = sv.add_parser("start", parents=[common], help="deploy the gateway (it keeps running after this returns)")
    s.add_argument("--port", type=int, default=8082, help="HTTP port (default 8082)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    s.add_argument("--acks", default="all", help="the gateway producer's acks: all, 1 or 0")
    s.add_argument("--replicas", type=int, default=1, help="gateway (ingress) replicas")
    s.add_argument(
        "--body-timeout-s",
        type=float,
        default=30.0,
        help="seconds a request body may take to arrive (a stream: the longest pause); 408 after",
    )
    s.set_defaults(func=cmd_serve_start)
    sv.add_parser("status", parents=[common], help="is the gateway running, where").set_defaults(func=cmd_serve_status)
    sv.add_parser(
        "stop", parents=[common], help="delete the gateway (and Serve, if nothing else runs on it)"
    ).set_defaults(func=cmd_serve_stop)
