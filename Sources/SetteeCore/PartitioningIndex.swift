extension RandomAccessCollection {
    /// The index of the first element for which `belongsInSecondPartition` holds, in a collection where every element
    /// for which it holds comes after every element for which it does not (a sorted collection split at a key);
    /// `endIndex` when it holds for none. Binary search: O(log n) calls of the predicate.
    @inlinable
    public func partitioningIndex(where belongsInSecondPartition: (Element) throws -> Bool) rethrows -> Index {
        var low = startIndex
        var n = count
        while n > 0 {
            let half = n / 2
            let mid = index(low, offsetBy: half)
            if try belongsInSecondPartition(self[mid]) {
                n = half
            } else {
                low = index(after: mid)
                n -= half + 1
            }
        }
        return low
    }
}
