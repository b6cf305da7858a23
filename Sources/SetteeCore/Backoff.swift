/// Capped exponential back-off, the one every retry loop uses (the smart client's `RetryPolicy`, the replica's
/// `RefusedApplyRetry`, the bench's preload retry).
public enum Backoff {
    /// `first` doubled `attempt` times (`attempt` 0 is `first`), never above `cap`. Never traps: the doubling
    /// stops at the cap before a shift could leave the type, and a negative `attempt` counts as 0.
    @inlinable
    public static func doubling<T: FixedWidthInteger>(_ first: T, attempt: Int, cap: T) -> T {
        let shift = min(max(attempt, 0), T.bitWidth - 2)
        return first > (cap >> shift) ? cap : min(cap, first << shift)
    }
}
