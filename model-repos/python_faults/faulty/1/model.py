"""Misbehaves on demand (see config.pbtxt), so the server's handling of each fault can be tested."""
import os
import signal
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0])
        if mode == 1:
            raise pb_utils.TritonModelException("faulty: raised on purpose")
        if mode == 3:
            return None
        if mode == 4:
            return []
        if mode == 5:
            return ["not a response" for _ in requests]
        if mode == 6:
            os._exit(3)
        if mode == 7:
            os.kill(os.getpid(), signal.SIGSTOP)
        if mode == 8:
            time.sleep(0.2)
            os._exit(3)
        responses = []
        for request in requests:
            m = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()
            if int(m[0]) == 2:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("faulty: error response", pb_utils.TritonError.INVALID_ARG)))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", m)]))
        return responses
