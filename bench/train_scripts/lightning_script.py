"""A Lightning loop as Ray's docs show it (``RayDDPStrategy``, ``RayLightningEnvironment``,
``RayTrainReportCallback``, ``prepare_trainer``: a checkpoint at each epoch's end), written once and run under
Ray Train or pcs-ray by ``config["framework"]``: the two differ in their import lines only."""

import importlib

import torch
from torch.utils.data import DataLoader, TensorDataset


def modules(framework: str):
    """``(train, train.lightning)`` of ``ray`` or ``pcs_ray``: what a ported script's imports give it."""
    return importlib.import_module(f"{framework}.train"), importlib.import_module(f"{framework}.train.lightning")


def train_func(config):
    import lightning.pytorch as pl

    train, ray_lightning = modules(config["framework"])

    class Model(pl.LightningModule):
        """A small MLP regressing the sum of its inputs (the plain script's model, under Lightning)."""

        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss)
            self.log("threads", float(torch.get_num_threads()))  # reported with the metrics: each side's threads
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    pl.seed_everything(0, verbose=False)
    x = torch.randn(config["samples"], 32)
    dl = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=config["batch"], shuffle=True)
    trainer = pl.Trainer(max_epochs=config["epochs"], devices="auto", accelerator="auto",
                         strategy=ray_lightning.RayDDPStrategy(), plugins=[ray_lightning.RayLightningEnvironment()],
                         callbacks=[ray_lightning.RayTrainReportCallback()], enable_checkpointing=False,
                         logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer = ray_lightning.prepare_trainer(trainer)
    trainer.fit(Model(), train_dataloaders=dl)
