//! Borrowing between priority levels (1.26+): every adjustment period each level's limit (CurrentCL) follows its
//! demand, within its lower and upper limits.
use super::state::State;

impl State {
    /// C's borrowing adjustment (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller.go`): per level, demand statistics of the period, smoothed demand, target;
    /// then a fair fraction so the limits of the non-exempt levels add up to their Σ NominalCL.
    pub(super) fn adjust_limits(&mut self) {
        for l in self.levels.iter_mut() {
            // The seat demand's time average and deviation over the period (kube-apiserver integrates it).
            let n = l.period_ns.max(1) as f64;
            let avg = l.period_sum / n;
            let var = (l.period_sum_sq / n - avg * avg).max(0.0);
            let stdev = var.sqrt();
            let envelope = avg + stdev;
            l.demand_avg = avg;
            l.demand_stdev = stdev;
            l.demand_hwm = l.period_hwm as f64;
            l.demand_smoothed = envelope.max(0.977 * l.demand_smoothed + 0.023 * envelope);
            l.period_sum = 0.0;
            l.period_sum_sq = 0.0;
            l.period_ns = 0;
            l.period_hwm = l.seats_in_use + l.waiting_seats;
        }
        let items: Vec<(usize, f64, f64, f64)> = self
            .levels
            .iter()
            .enumerate()
            // A retired level drains at the limit it had; the others share what the configured levels have.
            .filter(|(_, l)| !l.def.exempt && !l.retired && !l.fixed)
            .map(|(i, l)| {
                let lb = (l.lower as f64).max((l.nominal as f64).min(l.demand_hwm));
                let target = lb.max(l.demand_smoothed);
                (i, lb, target, l.upper as f64)
            })
            .collect();
        let total: f64 = self
            .levels
            .iter()
            .filter(|l| !l.def.exempt && !l.retired && !l.fixed)
            .map(|l| l.nominal as f64)
            .sum();
        let alloc = |ff: f64| -> f64 {
            items
                .iter()
                .map(|&(_, lb, t, ub)| (ff * t).clamp(lb, ub))
                .sum()
        };
        let sum_lb: f64 = items.iter().map(|x| x.1).sum();
        let ff = if sum_lb >= total {
            0.0 // oversubscribed: everyone falls back to the lower bound
        } else {
            let mut hi = 1.0;
            while alloc(hi) < total && hi < 1e9 {
                hi *= 2.0;
            }
            let mut lo = 0.0;
            for _ in 0..80 {
                let mid = (lo + hi) / 2.0;
                if alloc(mid) < total {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            hi
        };
        self.seat_fair_frac = ff;
        for &(i, lb, t, ub) in &items {
            let l = &mut self.levels[i];
            l.target = t;
            l.current_cl = (ff * t).clamp(lb, ub).round() as u32;
        }
        for l in self
            .levels
            .iter_mut()
            .filter(|l| l.def.exempt && !l.retired && !l.fixed)
        {
            l.target = l.demand_hwm;
            l.current_cl = (l.lower as f64).max(l.demand_hwm).round() as u32;
        }
    }
}
