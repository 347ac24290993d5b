"""What a launching run's Job and pods say about its workload's start (pure)."""

from __future__ import annotations

from pgsched.k8s.jobside import starts

JOB = {"metadata": {"name": "job-1"}, "status": {}}


def pod(status):
    return {
        "metadata": {"name": "job-1-x", "creationTimestamp": "2026-06-01T12:00:00Z"},
        "status": status,
    }


def test_a_sidecar_that_cannot_pull_its_image_blocks_the_start_like_the_workload():
    seen = starts.seen(
        JOB,
        [
            pod(
                {
                    "initContainerStatuses": [
                        {
                            "name": "pgsched-heartbeat",
                            "state": {"waiting": {"reason": "ErrImagePull"}},
                        }
                    ],
                    "containerStatuses": [
                        {"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}
                    ],
                }
            )
        ],
    )
    assert seen is not None and seen.reason == "ErrImagePull"
    assert seen.message.startswith("pod job-1-x, container pgsched-heartbeat")


def test_a_workload_that_already_ended_has_started():
    terminated = {"terminated": {"startedAt": "2026-06-01T12:00:03Z", "exitCode": 1}}
    seen = starts.seen(JOB, [pod({"containerStatuses": [{"name": "main", "state": terminated}]})])
    assert seen is not None and seen.started_at is not None and seen.started_at.second == 3


def test_a_finished_job_is_left_to_the_job_watch():
    finished = {**JOB, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert starts.seen(finished, []) is None


def test_a_suspended_job_without_a_queue_label_still_awaits_admission():
    seen = starts.seen({**JOB, "spec": {"suspend": True}}, [])
    assert seen is not None and seen.awaiting_admission
    assert seen.message == "Job job-1 is suspended, waiting for admission by whatever suspended it"
