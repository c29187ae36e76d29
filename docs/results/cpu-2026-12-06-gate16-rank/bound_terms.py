"""The fp16 gate bound's parts on the CPU model, two rows at 32K keys: the chains' term (alpha C), the key-norm
term (beta n(k): the products' fp16 accumulation and q_gate's rounding) and the absolute one, against the
largest error seen (|G - exact|). Prints medians over the keys, in the row's score units."""
import sys, torch
sys.path.insert(0,'.')
from tools.gate16_model import study_data, kernel_gate, exact_scores
from runtime.gate16 import gate_inputs
for data in ("positive","signed","indexer"):
    wl = study_data(data, 2, 32768, 2048, seed=0)
    gate = gate_inputs(wl.q, wl.weights, wl.k_fp8)
    for row in range(2):
        g, bound = kernel_gate(gate, row, wl.k_fp8)
        scale, alpha, beta, absolute = gate.row_bounds[row, :4].double().tolist()
        ex = exact_scores(wl.q[row].float(), wl.weights[row], wl.k_fp8.float())
        # bound components before scale
        G = g / scale
        c_term = bound - beta*gate.key_norms.double() - absolute
        n_term = beta*gate.key_norms.double()
        err = (g - ex).abs()
        top = ex.topk(2048).values[-1]
        print(data, row, "median bound %.3g  err max %.3g med %.3g | c-term %.3g n-term %.3g abs %.3g | kth %.3g  spread(std ex) %.3g" % (
            bound.median(), err.max(), err.median(), c_term.median(), n_term.median(), absolute, top, ex.std()))
