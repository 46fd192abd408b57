"""Hardware catalog: accelerators and networks from the vendors' data sheets. No torch.

Sources (dense numbers, i.e. without 2:4 sparsity; bandwidths per direction):
- NVIDIA A100 Tensor Core GPU data sheet (2021): 312 TFLOP/s BF16, HBM2 1,555 GB/s (40 GB) and HBM2e
  2,039 GB/s (80 GB SXM), NVLink 3 600 GB/s total = 300 GB/s per direction, 400 W (SXM); PCIe Gen4 x16.
- NVIDIA H100 Tensor Core GPU data sheet (2023): SXM 989 TFLOP/s BF16 / 1,979 FP8, 3.35 TB/s, NVLink 4
  900 GB/s total, 700 W; PCIe 756 / 1,513, 2.0 TB/s, 350 W, PCIe Gen5 x16.
- NVIDIA H200 data sheet (2024): the H100 SXM's compute with 141 GB HBM3e at 4.8 TB/s, 700 W.
- NVIDIA DGX B200 / HGX B200 data sheets (2024): per GPU 2.25 PFLOP/s BF16 / 4.5 FP8 dense, 180 GB usable
  HBM3e (of 192) at 8 TB/s, NVLink 5 1.8 TB/s total, 1,000 W.
- AMD Instinct MI300X data sheet (2023): 1,307 TFLOP/s BF16 / 2,615 FP8 dense, 192 GB HBM3 at 5.3 TB/s,
  Infinity Fabric 7 links x 64 GB/s per direction in an 8-GPU node, 750 W.
- PCIe: 16 lanes give ~32 GB/s per direction at Gen4 and ~64 GB/s at Gen5 (PCI-SIG); with --intra-node pcie
  GPUs talk through the PCIe switch / host at that rate.
- Networks: InfiniBand HDR 200 Gb/s, NDR 400 Gb/s, XDR 800 Gb/s per port (IBTA roadmap, NVIDIA ConnectX-6/7/8
  data sheets); Intel Omni-Path 100 Gb/s (BLOOM's cluster); RoCE at the Ethernet port speed. Latencies are
  typical switch + NIC figures per hop (~1 µs IB and Omni-Path, ~2-3 µs RoCE): throughput.latency adds
  2·⌈log₂ n⌉ hops to every collective across nodes.
- mm_efficiency, the fraction of the BF16 peak that large training GEMMs achieve, is per GPU: A100 and H100
  are fitted on the calibration rows of plan/published.py; the H100 PCIe and the H200 (the H100's silicon)
  take the H100 SXM's; B200 and MI300X have no published row in our table and carry assumed values (lower than
  the H100's, as larger peaks are harder to reach), not fits. Treat their predictions as estimates.
- attn_efficiency, flash attention's forward + backward speed as a fraction of the BF16 peak, counted as
  FlashAttention counts (causal blocks skipped, backward 2.5x forward), is taken from a published kernel
  benchmark, never fitted: H100 SXM5 (and the H200, the same silicon): 0.329, FlashAttention-2 — the kernel
  behind torch's SDPA flash backend, which our trainer calls — at head dim 128 and 16K tokens in Shah et al.
  2024, "FlashAttention-3" (arXiv:2407.08608), Figures 5-6: 335 TFLOP/s forward (causal), 322 backward, so
  3.5 / (1/335 + 2.5/322) = 326 of 989. (FlashAttention-3 itself reaches 616 / 561 there, 0.58 of the peak:
  a run that uses it is faster than the plan.) GPUs without a published figure here run flash attention at
  their GEMM efficiency (mm_efficiency, within FlashAttention-2's 50-73% of the A100 peak, Dao 2023).
- Prices are indicative on-demand cloud rates per GPU-hour in 2025 (they vary several-fold by provider
  and commitment): override with `--price`.
"""

from dataclasses import dataclass

from bessemer.errors import ConfigError


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gb: float
    bf16_tflops: float  # dense (no 2:4 sparsity)
    fp8_tflops: float  # dense; 0 = no FP8 tensor cores
    match: tuple[str, ...]  # substrings of the device name reported by the driver (lower case)
    hbm_gbs: float = 0.0  # HBM bandwidth, GB/s
    link: str = ""  # intra-node interconnect
    link_gbs: float = 0.0  # intra-node bandwidth per GPU per direction, GB/s
    pcie_gbs: float = 32.0  # the GPU's PCIe x16 bandwidth per direction, GB/s
    power_w: float = 0.0
    price_per_hour: float = 0.0  # USD per GPU-hour, indicative
    mm_efficiency: float = 0.65  # achieved fraction of the BF16 peak in large training GEMMs (calibrated)
    attn_efficiency: float = 0.0  # flash attention forward + backward, fraction of the BF16 peak (published
    # kernel benchmark, not fitted); 0 = none published: the GEMM efficiency


GPUS: dict[str, GPU] = {g.name: g for g in [
    GPU("a100-40gb", 40, 312, 0, ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40gb"),
        hbm_gbs=1555, link="NVLink 3", link_gbs=300, pcie_gbs=32, power_w=400, price_per_hour=1.30,
        mm_efficiency=0.65),
    GPU("a100-80gb", 80, 312, 0, ("a100-sxm4-80gb", "a100 80gb", "a100-80gb", "a100"),
        hbm_gbs=2039, link="NVLink 3", link_gbs=300, pcie_gbs=32, power_w=400, price_per_hour=1.80,
        mm_efficiency=0.65),
    GPU("h100-sxm", 80, 989, 1979, ("h100 80gb hbm3", "h100-sxm", "h100 sxm"),
        hbm_gbs=3350, link="NVLink 4", link_gbs=450, pcie_gbs=64, power_w=700, price_per_hour=2.50,
        mm_efficiency=0.68, attn_efficiency=0.329),
    GPU("h100-pcie", 80, 756, 1513, ("h100 pcie", "h100-pcie"),
        hbm_gbs=2000, link="PCIe Gen5", link_gbs=64, pcie_gbs=64, power_w=350, price_per_hour=2.10,
        mm_efficiency=0.68),
    GPU("h200", 141, 989, 1979, ("h200",),
        hbm_gbs=4800, link="NVLink 4", link_gbs=450, pcie_gbs=64, power_w=700, price_per_hour=3.50,
        mm_efficiency=0.68, attn_efficiency=0.329),
    GPU("b200", 180, 2250, 4500, ("b200",),
        hbm_gbs=8000, link="NVLink 5", link_gbs=900, pcie_gbs=64, power_w=1000, price_per_hour=5.50,
        mm_efficiency=0.55),
    GPU("mi300x", 192, 1307, 2615, ("mi300x",),
        hbm_gbs=5300, link="Infinity Fabric", link_gbs=448, pcie_gbs=64, power_w=750, price_per_hour=2.50,
        mm_efficiency=0.45),
]}


@dataclass(frozen=True)
class Network:
    name: str
    gbps: float  # per port, Gb/s
    latency_us: float
    kind: str  # "infiniband" | "roce" | "omni-path"
    radix: int  # ports of a typical switch of this generation (fat-tree sizing)

    @property
    def gbs(self) -> float:
        """GB/s per port per direction."""
        return self.gbps / 8


NETWORKS: dict[str, Network] = {n.name: n for n in [
    Network("ib-hdr", 200, 1.0, "infiniband", 40),  # Quantum QM8700: 40 x HDR
    Network("ib-ndr", 400, 1.0, "infiniband", 64),  # Quantum-2 QM9700: 64 x NDR
    Network("ib-xdr", 800, 1.0, "infiniband", 144),  # Quantum-X800: 144 x XDR
    Network("roce-100", 100, 2.5, "roce", 64),
    Network("roce-200", 200, 2.5, "roce", 64),
    Network("roce-400", 400, 2.5, "roce", 64),  # 51.2 Tb/s switch ASICs: 128 x 400G; 64 is a common box
    Network("opa-100", 100, 1.0, "omni-path", 48),  # Intel Omni-Path 100 Gb/s, 48-port edge switches
]}


def match_gpu(device_name: str) -> GPU | None:
    """The catalog entry for a driver-reported name such as 'NVIDIA H100 80GB HBM3'; None if unknown."""
    name = device_name.lower()
    for gpu in GPUS.values():
        if any(m in name for m in gpu.match):
            return gpu
    return None


def get_gpu(name: str) -> GPU:
    if name not in GPUS:
        raise ConfigError(f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return GPUS[name]


def get_network(name: str) -> Network:
    if name not in NETWORKS:
        raise ConfigError(f"unknown network {name!r}; choose one of {', '.join(NETWORKS)}")
    return NETWORKS[name]
