"""SDPO (teacher prompt, advantages, one step), consolidation and the training worker process."""

from continual_lsp.learning.sdpo import JOB_KIND, NothingToLearn, SdpoJob, sdpo_step
from continual_lsp.learning.worker import TrainingWorker, WorkerError

__all__ = ["JOB_KIND", "NothingToLearn", "SdpoJob", "TrainingWorker", "WorkerError", "sdpo_step"]
