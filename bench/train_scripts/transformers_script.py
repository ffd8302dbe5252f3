"""A Hugging Face ``Trainer`` loop as Ray's docs show it (``trainer.add_callback(RayTrainReportCallback())``,
``prepare_trainer``; the Trainer saves, and the callback reports, at each epoch's end): a tiny BERT built from
its config on synthetic token ids, written once and run under Ray Train or pcs-ray by ``config["framework"]``;
the two differ in their import lines only."""

import importlib
import os
import tempfile

import torch

SEQ, VOCAB = 32, 1000


class Samples(torch.utils.data.Dataset):
    """Synthetic sequences, each seeded by its index: the same data on every rank and framework, none downloaded."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return {"input_ids": ids, "labels": int(ids[0] < VOCAB // 2)}


def train_func(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built from its config: nothing to fetch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    hf = importlib.import_module(f"{config['framework']}.train.huggingface.transformers")
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=128,
                                                     max_position_embeddings=SEQ))
    args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="bench-hf-"), num_train_epochs=config["epochs"],
                             per_device_train_batch_size=config["batch"], learning_rate=1e-3,
                             save_strategy="epoch", logging_strategy="epoch", report_to=[], disable_tqdm=True,
                             use_cpu=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Samples(config["samples"]))
    trainer.add_callback(hf.RayTrainReportCallback())
    trainer = hf.prepare_trainer(trainer)
    trainer.train()
