"""Decoupled model: streams one response per input element from a worker thread, then the final flag."""
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Only the threads still sending: finalize waits for them. Finished ones are dropped on the next
        # call, so the list does not grow with every request.
        self.threads = []

    def execute(self, requests):
        self.threads = [t for t in self.threads if t.is_alive()]
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            sender = request.get_response_sender()
            t = threading.Thread(target=self.respond, args=(sender, values))
            t.start()
            self.threads.append(t)
        return None

    @staticmethod
    def respond(sender, values):
        for i, v in enumerate(values):
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([v], np.int32)),
                pb_utils.Tensor("IDX", np.array([i], np.int32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for t in self.threads:
            t.join()
