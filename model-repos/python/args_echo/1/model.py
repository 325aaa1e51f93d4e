"""Echoes initialize's args and each request's metadata as JSON text."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.args = {k: v for k, v in args.items() if k != "model_config"}
        self.args["config_name"] = cfg["name"]
        self.args["config_parameters"] = cfg.get("parameters")

    def execute(self, requests):
        responses = []
        for r in requests:
            req = {
                "request_id": r.request_id(),
                "correlation_id": r.correlation_id(),
                "flags": r.flags(),
                "parameters": json.loads(r.parameters()),
                "requested_output_names": sorted(r.requested_output_names()),
                "is_cancelled": r.is_cancelled(),
            }
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("ARGS", np.array([json.dumps(self.args, sort_keys=True)], dtype=np.object_)),
                pb_utils.Tensor("REQUEST", np.array([json.dumps(req, sort_keys=True)], dtype=np.object_)),
            ]))
        return responses
