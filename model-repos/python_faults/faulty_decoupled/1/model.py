"""Decoupled faults on demand (see config.pbtxt)."""
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            sender = request.get_response_sender()
            if mode == 1:
                raise pb_utils.TritonModelException("faulty_decoupled: raised on purpose")
            if mode == 2:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("faulty_decoupled: error response")))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([mode], np.int32))]))
            if mode == 3:
                os._exit(4)
            if mode == 4:
                return [pb_utils.InferenceResponse([]) for _ in requests]
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
