"""Y = X; ready only while <model folder>/NOT_READY does not exist."""
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.flag = os.path.join(args["model_repository"], "NOT_READY")

    def is_model_ready(self):
        return not os.path.exists(self.flag)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
