"""Decoupled model that streams until its request is cancelled, and says on /metrics that it noticed."""
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

INTERVAL_S = 0.01
LIMIT_S = 10.0
LOOPS = ("sender", "request", "idle")


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.outcomes_family = pb_utils.MetricFamily(
            name="stream_until_cancelled_total", description="Streaming loops that ended, by loop and outcome",
            kind=pb_utils.MetricFamily.COUNTER)
        self.running_family = pb_utils.MetricFamily(
            name="stream_until_cancelled_running", description="Streaming loops not yet ended",
            kind=pb_utils.MetricFamily.GAUGE)
        self.outcomes = {
            (loop, outcome): self.outcomes_family.Metric(labels={**labels, "loop": loop, "outcome": outcome})
            for loop in LOOPS for outcome in ("cancelled", "limit")
        }
        self.running = self.running_family.Metric(labels=labels)
        self.threads = []

    def execute(self, requests):
        self.threads = [t for t in self.threads if t.is_alive()]
        for request in requests:
            loop = LOOPS[int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])]
            sender = request.get_response_sender()
            self.running.increment(1)
            if loop == "request":
                # In execute itself: the instance is busy until the client cancels.
                self.stream(sender, request.is_cancelled, loop)
            else:
                t = threading.Thread(target=self.stream, args=(sender, sender.is_cancelled, loop))
                t.start()
                self.threads.append(t)
        return None

    def stream(self, sender, is_cancelled, loop):
        try:
            deadline = time.monotonic() + LIMIT_S
            sent = 0
            while not is_cancelled():
                if time.monotonic() > deadline:
                    self.outcomes[(loop, "limit")].increment(1)
                    sender.send(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"not cancelled within {LIMIT_S} s")))
                    break
                if loop != "idle" or sent == 0:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([sent], np.int32))]))
                    sent += 1
                time.sleep(INTERVAL_S)
            else:
                pb_utils.Logger.log_info(f"stream_until_cancelled: {loop} loop cancelled after {sent} responses")
                self.outcomes[(loop, "cancelled")].increment(1)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            self.running.increment(-1)

    def finalize(self):
        for t in self.threads:
            t.join()
