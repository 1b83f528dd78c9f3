"""An app with a schedule declared in code, for the periodic-jobs process test
(``--app tests.worker.periodic_apps``)."""

from __future__ import annotations

from service.worker import App, JobContext

app = App("periodic-tests")


@app.periodic("* * * * * *", payload={"source": "every second"})  # six fields: seconds first
@app.handler("every_second")
def every_second(ctx: JobContext) -> dict[str, object]:
    return {"payload": ctx.payload}
