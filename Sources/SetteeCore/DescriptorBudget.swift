#if canImport(Glibc)
    import Glibc
#endif

/// How a process's file descriptors are shared between its listening ports.
///
/// Every port has a connection cap (`Limits.maxConnections`, `Limits.maxAdminConnections`, ...). Their sum must
/// stay below the descriptor limit, or idle connections on one port exhaust descriptors and every port stops
/// answering, silently. `fit` scales the caps down when the limit is too small for them.
public enum DescriptorBudget {
    /// Smallest cap a port keeps however small the descriptor limit: enough for an operator to get in.
    public static let minimumCap = 16

    /// `caps` scaled down proportionally so that their sum plus `Limits.reservedDescriptors` fits in
    /// `descriptorLimit`; unchanged when they already fit. Each cap stays at least `minimumCap`.
    public static func fit(_ caps: [Int], descriptorLimit: Int) -> [Int] {
        let total = caps.reduce(0) { $0 &+ max(0, $1) }
        let available = descriptorLimit - Limits.reservedDescriptors
        guard total > 0, total > available else { return caps }
        let usable = max(0, available)
        // Proportional share, computed in Double: caps and limits are far below 2^53.
        return caps.map { cap in
            let share = Double(max(0, cap)) * Double(usable) / Double(total)
            return max(minimumCap, Int(share.rounded(.down)))
        }
    }

    /// Raises the soft descriptor limit to the hard one (as Couchbase asks of its installs) and returns the
    /// soft limit in force afterwards (`Int.max` when unlimited).
    public static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur >= UInt64(Int.max) ? Int.max : Int(limit.rlim_cur)
    }
}
