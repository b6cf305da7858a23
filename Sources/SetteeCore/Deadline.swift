/// `operation`'s result if it is done within `limit`; past it `operation` is cancelled and `overdue()` is thrown.
///
/// For a whole exchange with a peer, head and body: AsyncHTTPClient's deadline (`execute(_:timeout:)`) ends with the
/// response head, so without this a peer sending its body a byte at a time holds the caller for as long as it likes.
public func withDeadline<R: Sendable>(
    _ limit: Duration, overdue: @autoclosure () -> any Error,
    _ operation: @escaping @Sendable () async throws -> R
) async throws -> R {
    let outcome = try await withThrowingTaskGroup(of: R?.self) { group -> R?? in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        return try await group.next()
    }
    guard case .some(.some(let value)) = outcome else { throw overdue() }
    return value
}
