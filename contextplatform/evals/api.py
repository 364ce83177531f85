"""HTTP endpoints of evaluation sets: read and replace a route's cases, start a run, read a run.
Thin: parse, call a service or selector, present."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.views import ApiView
from contextplatform.evals import selectors, services
from contextplatform.evals.cases import CaseSet, parse_cases
from contextplatform.routes.selectors import existing_route


class RouteEvalsView(ApiView):
    required_scopes = {"GET": "routes.read", "PUT": "routes.write"}

    @extend_schema(responses={200: dict}, summary="Read a route's evaluation cases")
    def get(self, request: Request, name: str) -> Response:
        route = existing_route(name, param=None)
        return Response({"route": route.name, "cases": selectors.cases_of(route)})

    @extend_schema(
        request=CaseSet,
        responses={200: dict},
        summary="Replace a route's evaluation cases (at most 500, ids unique)",
    )
    def put(self, request: Request, name: str) -> Response:
        route = existing_route(name, param=None)
        data = request.data
        if isinstance(data, dict):
            data = {key: value for key, value in data.items() if key != "route"}
        services.replace_cases(route=route, cases=parse_cases(data))
        return Response({"route": route.name, "cases": selectors.cases_of(route)})


class RouteEvalsRunView(ApiView):
    required_scopes = {"POST": "evals.run"}

    @extend_schema(
        request=None,
        responses={202: dict},
        summary="Run a route's evaluation cases through the pipeline (nothing is written)",
    )
    def post(self, request: Request, name: str) -> Response:
        run = services.start_run(route=existing_route(name, param=None))
        return Response({"run": run.id}, status=status.HTTP_202_ACCEPTED)


class EvalRunView(ApiView):
    required_scopes = {"GET": "routes.read"}

    @extend_schema(
        responses={200: dict}, summary="Read an evaluation run: metrics, cases, previous"
    )
    def get(self, request: Request, run: str) -> Response:
        found = selectors.existing_run(run)
        memory_text = request.user.has_scope("memory.read")
        return Response(selectors.run_representation(found, memory_text=memory_text))
