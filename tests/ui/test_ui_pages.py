"""Navigation, the queue, the clusters' GPU map, empty states, phone width and dark theme."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from frontend.charts import SLICE_W
from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.ui.conftest import PHONE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
MIG_MODEL = "A100-SXM4-80GB"


@pytest.fixture
def busy(people: Any, local_cluster: Any) -> dict[str, Job]:
    """Vision fills the cluster (8 GPUs); a second vision job and a language job wait."""
    jobs = {
        "big": submit_job(people["alice"], spec(name="big", nodes=2, gpus_per_node=4)).job,
        "waiter": submit_job(people["bob"], spec(name="waiter", gpus_per_node=4)).job,
        "lang": submit_job(
            people["charlie"], spec(name="lang-eval", gpus_per_node=2, time_limit="1h")
        ).job,
    }
    run_cycle()
    run_cycle()
    for job in jobs.values():
        job.refresh_from_db()
    return jobs


@pytest.fixture
def mig_cluster(teams: Any, tmp_path: Any) -> Cluster:
    """One node, two A100s in MIG mode: GPU 0 laid out as 3g + 2g + 1g, GPU 1 idle."""
    layout = [
        {"gpu": 0, "profile": "3g.40gb", "start": 0, "size": 4},
        {"gpu": 0, "profile": "2g.20gb", "start": 4, "size": 2},
        {"gpu": 0, "profile": "1g.10gb", "start": 6, "size": 1},
    ]
    cluster = Cluster.objects.create(
        name="mig",
        kind="local",
        settings={
            "workdir": str(tmp_path / "mig-jobs"),
            "nodes": [
                {"name": "m1", "gpus": 2, "gpu_model": MIG_MODEL, "mig": True, "mig_layout": layout}
            ],
        },
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(team=teams["vision"], gpu_model=MIG_MODEL, nominal_gpus=2)
    return cluster


@pytest.mark.parametrize(
    ("link", "heading"),
    [
        ("Dashboard", "Dashboard"),
        ("Submit", "Submit a job"),
        ("Queue", "Queue"),
        ("Clusters", "Clusters"),
        ("Teams", "Teams"),
    ],
)
def test_every_page_is_reachable_from_the_navigation_and_back_works(
    people: Any, sign_in: Any, local_cluster: Any, link: str, heading: str
) -> None:
    page = sign_in("dana")
    page.goto("/me/")
    page.get_by_label("Main").get_by_role("link", name=link, exact=True).click()
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
    expect(page.get_by_label("Main").get_by_role("link", name=link, exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    page.go_back()
    expect(page).to_have_url(re.compile(r"/me/$"))
    expect(page.get_by_role("heading", name="dana")).to_be_visible()


def test_the_queue_lists_waiting_jobs_in_order_with_reasons_in_numbers(
    busy: dict[str, Job], sign_in: Any, people: Any
) -> None:
    page = sign_in("alice")
    page.get_by_label("Main").get_by_role("link", name="Queue").click()
    row = page.locator(f'tr[data-job="{busy["waiter"].pk}"]')
    expect(row.locator("td.num")).to_have_text(str(busy["waiter"].queue_position))
    expect(row).to_contain_text("4 \N{MULTIPLICATION SIGN} any GPU")
    expect(row.locator("td.reason")).to_have_text(busy["waiter"].reason["message"])
    assert re.search(r"\d", busy["waiter"].reason["message"])
    # Tenant scoping: language's waiting job is not alice's to see.
    expect(page.locator(f'tr[data-job="{busy["lang"].pk}"]')).to_have_count(0)
    # An array's tasks past its limit come in one row, after the queue, without a reload.
    sweep = submit_job(people["alice"], spec(name="sweep", array="0-5%2")).job
    run_cycle()
    held = page.locator("tr.held")
    expect(held).to_have_count(1, timeout=12_000)
    expect(page.locator("table.queue tbody tr").last).to_have_class("held")
    expect(held.get_by_role("link")).to_have_text("sweep[2-5]")
    expect(held).to_contain_text("4 tasks")
    expect(held.locator("td.reason")).to_contain_text("array 'sweep' runs at most 2 tasks")
    expect(page.locator("table.queue tbody tr[data-job]")).to_have_count(3)  # waiter, 0, 1
    expect(page.locator("#queue-live > p")).to_contain_text("7 jobs, 4 of them held back")
    page.get_by_label("State").select_option("active")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"state=active"))
    expect(page.locator("table.queue tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job="{busy["big"].pk}"]')).to_contain_text("Admitted")
    page.get_by_label("State").select_option("finished")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#queue-live .empty")).to_have_text("No jobs match.")
    page.go_back()
    expect(page.locator("table.queue tbody tr")).to_have_count(1)
    # The row opens its first held task, whose page shows the whole array.
    page.goto("/queue/")
    page.locator("tr.held").get_by_role("link").click()
    third = Job.objects.get(array_id=sweep.array_id, array_index=2)
    expect(page).to_have_url(re.compile(rf"/jobs/{third.pk}/$"))
    expect(page.get_by_role("heading", name="sweep[2]", exact=True)).to_be_visible()
    expect(page.locator("#job-array")).to_contain_text("6 tasks")


def test_the_queue_follows_a_cancelled_job_without_a_reload(
    busy: dict[str, Job], sign_in: Any, people: Any
) -> None:
    page = sign_in("bob")
    page.goto("/queue/")
    row = page.locator(f'tr[data-job="{busy["waiter"].pk}"]')
    expect(row).to_be_visible()
    from queue_service.jobs.services import cancel_job

    cancel_job(people["bob"], busy["waiter"])
    expect(row).to_have_count(0, timeout=12_000)
    expect(page.locator("#queue-live .empty")).to_contain_text("Nothing is waiting")


def test_the_cluster_map_colours_gpus_by_team_and_shows_a_down_node(
    busy: dict[str, Job], sign_in: Any, local_cluster: Any
) -> None:
    page = sign_in("charlie")
    page.get_by_label("Main").get_by_role("link", name="Clusters").click()
    cluster = page.locator('section[data-cluster="local"]')
    expect(cluster.locator('rect.gpu.held[data-team="vision"]')).to_have_count(8)
    expect(cluster.locator(".totals")).to_contain_text("in use8")
    # Another team's jobs are not linked from the map; the team is shown.
    expect(cluster.locator("a rect")).to_have_count(0)
    local_cluster.settings["nodes"][1]["state"] = "down"
    local_cluster.save()
    sync_cluster(local_cluster.pk)
    node = cluster.locator('[data-node="n2"]')
    expect(node.locator(".node-state")).to_have_text("down", timeout=12_000)
    expect(node.locator("rect.node-off")).to_have_count(1)
    expect(cluster.locator(".totals .bad")).to_contain_text("down1")


def test_mig_gpus_show_their_slices_where_they_sit_and_the_picker_what_fits(
    people: Any, sign_in: Any, mig_cluster: Cluster
) -> None:
    page = sign_in("alice")
    page.goto("/clusters/")
    gpu0 = page.locator('section[data-cluster="mig"] rect.slice')
    expect(gpu0).to_have_count(3)
    slot = SLICE_W  # the width of one of an A100's 8 memory slices
    expect(gpu0.nth(1)).to_have_attribute("data-profile", "2g.20gb")
    assert float(gpu0.nth(1).get_attribute("x")) == pytest.approx(4 * slot + 0.75)
    assert float(gpu0.nth(1).get_attribute("width")) == pytest.approx(2 * slot - 1.5)

    page.get_by_label("Main").get_by_role("link", name="Submit").click()
    page.get_by_label("Inference / agent").check()
    expect(page.locator("#f-nodes")).to_be_hidden()
    picker = page.locator(".mig-picker")
    expect(picker.locator("label", has_text="2g.20gb")).to_contain_text("1 free now")
    expect(picker.locator("label", has_text="7g.80gb")).to_contain_text(
        "an idle GPU can be re-laid out"
    )
    picker.locator("label", has_text="3g.40gb").click()
    expect(page.locator("#f-gpus_per_node")).to_be_hidden()
    page.fill("#f-name", "chat-agent")
    page.fill("#f-command", "python serve.py")
    page.get_by_label("Priority").select_option("high")
    expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "starts")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/"))
    job = Job.objects.get(name="chat-agent")
    assert (job.kind, job.spec["mig_profile"], job.spec["nodes"]) == ("agent", "3g.40gb", 1)


def test_empty_states_say_what_to_do(people: Any, sign_in: Any) -> None:
    page = sign_in("alice")
    expect(page.locator("#dashboard-live")).to_contain_text("Nothing of your team is running.")
    expect(page.locator("#dashboard-live")).to_contain_text("No job is waiting.")
    page.goto("/clusters/")
    expect(page.locator("main")).to_contain_text("No clusters are configured.")
    page.goto("/queue/")
    expect(page.locator("#queue-live .empty")).to_have_text("Nothing is waiting.")
    response = page.goto("/no/such/page/")
    assert response.status == 404
    expect(page.locator("main")).to_contain_text("/no/such/page/")


def test_a_phone_gets_one_column_without_sideways_scrolling(
    busy: dict[str, Job], sign_in: Any
) -> None:
    page = sign_in("alice", viewport=PHONE, is_mobile=True, has_touch=True)
    for path in ("/", "/queue/", "/clusters/", f"/jobs/{busy['big'].pk}/", "/submit/"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px on a phone"
    page.goto("/")
    boxes = {
        name: page.locator(f'section[aria-labelledby="{name}-h"]').bounding_box()
        for name in ("running", "pending", "quota", "map", "recent")
    }
    # One column, full width, the quotas and GPUs before the list of finished jobs.
    assert len({(b["x"], b["width"]) for b in boxes.values()}) == 1
    order = sorted(boxes, key=lambda name: boxes[name]["y"])
    assert order == ["running", "pending", "quota", "map", "recent"]
    expect(page.locator("table.jobs thead").first).to_be_hidden()


def test_the_dark_theme_follows_the_system_setting(people: Any, sign_in: Any) -> None:
    def background(scheme: str) -> str:
        page = sign_in("alice", color_scheme=scheme)
        return page.evaluate("getComputedStyle(document.body).backgroundColor")

    assert background("light") == "rgb(245, 246, 248)"
    assert background("dark") == "rgb(17, 20, 24)"


def set_visibility(page: Any, state: str) -> None:
    """What the browser does when the tab is hidden or shown again."""
    page.evaluate(
        """state => {
            Object.defineProperty(document, "visibilityState", {value: state, configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        state,
    )


def test_a_hidden_tab_stops_polling_and_catches_up_when_shown_again(
    people: Any, sign_in: Any
) -> None:
    page = sign_in("alice")
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if "/live/dashboard/" in r.url else None)
    page.wait_for_timeout(5_600)  # every 5 s while visible
    assert len(polls) >= 1
    set_visibility(page, "hidden")
    polls.clear()
    page.wait_for_timeout(11_000)
    assert polls == []  # two poll periods hidden: no request at all
    set_visibility(page, "visible")
    page.wait_for_timeout(1_000)
    assert 1 <= len(polls) <= 2  # shown again: a refresh at once, not a burst


def test_a_page_whose_session_ends_goes_to_sign_in_instead_of_polling_the_form_in(
    people: Any, sign_in: Any
) -> None:
    page = sign_in("alice")
    page.goto("/queue/?state=all")
    page.context.clear_cookies()  # signed out elsewhere, or the session expired
    page.wait_for_url(re.compile(r"/login/\?next=/queue/%3Fstate%3Dall$"), timeout=12_000)
    expect(page.locator("#queue-live")).to_have_count(0)
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
