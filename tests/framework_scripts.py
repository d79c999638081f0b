"""Small real training scripts under the Hugging Face Trainer, Lightning and accelerate: each step waits ~8 ms on its
data (a dataset that sleeps, no CPU work), nothing to download (the models are built here). The line numbers that
the tests expect are counted by hand from these texts (the first line after the opening quotes is line 1)."""

HF_TRAINER = """\
import time
import torch
import transformers


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.002)  # storage: no CPU work
        return {"x": torch.ones(16), "labels": torch.tensor(i % 2)}


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(16, 2)

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


args = transformers.TrainingArguments(
    output_dir="out", max_steps=60, per_device_train_batch_size=4, learning_rate=1e-3,
    report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True, use_cpu=True,
    dataloader_num_workers=0,
)
trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=Slow())
trainer.train()
"""
HF_ARGS_LINE = 25  # args = transformers.TrainingArguments(
HF_TRAIN_LINE = 31  # trainer.train()

LIGHTNING = """\
import time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.002)  # storage: no CPU work
        return torch.ones(16), i % 2


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(Slow(), batch_size=4, num_workers=0)


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(16, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


trainer = pl.Trainer(max_steps=60, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Classifier(), datamodule=Data())
"""
LIGHTNING_LOADER_LINE = 18  # return DataLoader(...) in Data.train_dataloader
LIGHTNING_TRAINER_LINE = 34  # trainer = pl.Trainer(
LIGHTNING_FIT_LINE = 36  # trainer.fit(...)

ACCELERATE = """\
import time
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.002)  # storage: no CPU work
        return torch.ones(16), i % 2


accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(16, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(Slow(), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
    if step == 60:
        break
"""
ACCELERATOR_LINE = 16  # accelerator = Accelerator(cpu=True)
ACCELERATE_LOADER_LINE = 19  # loader = DataLoader(...)
ACCELERATE_PREPARE_LINE = 20  # accelerator.prepare(...): where the loader that is stepped is built
