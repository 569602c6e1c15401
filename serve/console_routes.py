"""The web console's routes on the gateway's FastAPI app (serve/console.py renders the pages).

No ``from __future__ import annotations`` here: FastAPI must see the real ``Request`` type of each route.

``console_mixin(app)`` returns a class whose methods are the ``/console`` routes; the gateway's Serve ingress
class (serve/http.py) inherits it, so the console runs in the gateway's replicas beside the REST API and
shares its ``Admin`` and worker threads. Forms are posted as ``application/x-www-form-urlencoded`` and read
with the standard library (no multipart dependency). A failed action re-renders its page with the error
(HTTP 400 for a bad form value, the Kafka error's gateway status otherwise); a successful one redirects
(303) to the page that shows its result.
"""

from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from serve.console import ConsoleError, ConsoleViews, render
from serve.errors import from_exception


async def _form(request: Request, limit: int = 1 << 20) -> dict[str, str]:
    body = await request.body()
    if len(body) > limit:
        raise ConsoleError("form too large")
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True).items()}


def _page(template: str, ctx: dict, status: int = 200) -> HTMLResponse:
    return HTMLResponse(render(template, **ctx), status_code=status)


def _see(url: str, message: str | None = None) -> RedirectResponse:
    return RedirectResponse(url + (f"?message={quote(message)}" if message else ""), status_code=303)


def console_mixin(app) -> type:
    """The console's routes, registered on ``app``, as methods of a mixin for the ingress class (which must
    provide ``self.run(fn, *args)`` for blocking work, ``self.cluster`` and ``self.admin``)."""

    class ConsoleRoutes:
        def _views(self) -> ConsoleViews:
            views = getattr(self, "_console_views", None)
            if views is None:
                views = self._console_views = ConsoleViews(self.cluster, self.admin)
            return views

        async def _show(self, fn, *args, back: str = "/console/topics") -> HTMLResponse:
            """``fn(*args) -> (template, context)`` on a worker thread, rendered; errors as an error page."""
            try:
                template, ctx = await self.run(fn, *args)
                return _page(template, ctx)
            except ConsoleError as e:
                return self._error(str(e), 400, back)
            except Exception as e:  # noqa: BLE001 - a Kafka error (unknown topic, ...) is shown, not raised
                err = from_exception(e)
                return self._error(err.message, err.status, back)

        def _error(self, text: str, status: int, back: str) -> HTMLResponse:
            return _page(
                "error.html",
                {
                    "cluster": self.cluster,
                    "page": "",
                    "now": "",
                    "title": text,
                    "error": text,
                    "back": back,
                    "message": None,
                },
                status,
            )

        async def _act(self, fn, *args, back: str) -> Any:
            """An action on a worker thread: its result, or an error page for ``back`` (not raised)."""
            try:
                return True, await self.run(fn, *args)
            except ConsoleError as e:
                return False, self._error(str(e), 400, back)
            except Exception as e:  # noqa: BLE001
                err = from_exception(e)
                return False, self._error(err.message, err.status, back)

        @app.get("/console", include_in_schema=False)
        async def console_home(self) -> Response:
            return RedirectResponse("/console/topics", status_code=307)

        @app.get("/console/brokers", include_in_schema=False)
        async def console_brokers(self) -> Response:
            return await self._show(self._views().brokers)

        @app.get("/console/topics", include_in_schema=False)
        async def console_topics(self, internal: int = 0, message: str | None = None) -> Response:
            return await self._show(self._views().topics, bool(internal), message)

        @app.post("/console/topics", include_in_schema=False)
        async def console_create_topic(self, request: Request) -> Response:
            form = await _form(request)
            ok, res = await self._act(self._views().create_topic, form, back="/console/topics")
            return _see(f"/console/topics/{quote(res)}", f"created topic {res}") if ok else res

        @app.get("/console/topics/{topic}", include_in_schema=False)
        async def console_topic(self, topic: str, message: str | None = None) -> Response:
            return await self._show(self._views().topic, topic, message)

        @app.post("/console/topics/{topic}/partitions", include_in_schema=False)
        async def console_add_partitions(self, topic: str, request: Request) -> Response:
            form = await _form(request)
            back = f"/console/topics/{quote(topic)}"
            ok, res = await self._act(self._views().add_partitions, topic, form, back=back)
            return _see(back, f"{topic} now has {res} partitions") if ok else res

        @app.post("/console/topics/{topic}/delete", include_in_schema=False)
        async def console_delete_topic(self, topic: str, request: Request) -> Response:
            form = await _form(request)
            ok, res = await self._act(self._views().delete_topic, topic, form, back=f"/console/topics/{quote(topic)}")
            return _see("/console/topics", f"deleted topic {topic}") if ok else res

        @app.get("/console/topics/{topic}/messages", include_in_schema=False)
        async def console_messages(self, topic: str, request: Request) -> Response:
            return await self._show(
                self._views().messages, topic, dict(request.query_params), back=f"/console/topics/{quote(topic)}"
            )

        @app.get("/console/groups", include_in_schema=False)
        async def console_groups(self) -> Response:
            return await self._show(self._views().groups)

        @app.get("/console/groups/{group}", include_in_schema=False)
        async def console_group(self, group: str, message: str | None = None) -> Response:
            return await self._show(self._views().group, group, message, back="/console/groups")

        @app.post("/console/groups/{group}/reset", include_in_schema=False)
        async def console_reset(self, group: str, request: Request) -> Response:
            form = await _form(request)
            back = f"/console/groups/{quote(group)}"
            views = self._views()
            ok, plan = await self._act(views.reset_plan, group, form, back=back)
            if not ok:
                return plan
            if form.get("action") == "apply":
                ok, res = await self._act(views.apply_reset, group, plan, back=back)
                if not ok:
                    return res
                return _see(back, f"reset {len(plan)} partition offset(s) of group {group}")
            return await self._show(views.group, group, None, plan, form, back=back)

    return ConsoleRoutes
