import Foundation
import SetteeCore

/// `Database.saveAll`'s new-document rows (`Store.newDocumentRow`: validation, serialization and the
/// revision's MD5) computed on a thread of its own ahead of the writer, which only inserts them (ADR 0080).
/// The documents are split into chunks of `Limits.liteSavePrepareChunk`; the helper thread claims them in
/// order and stays at most `Limits.liteSavePrepareAhead` chunks ahead of the writer (that bounds the
/// serialized bytes waiting). A chunk the helper has not claimed when the writer reaches it is computed by the
/// writer itself, so a helper that is never scheduled costs nothing but the thread.
///
/// `@unchecked Sendable`: the inputs are immutable, `current` is the writer's alone, and every other stored
/// property is guarded by `condition`.
final class SavePipeline: @unchecked Sendable {
    private let documents: [Document]
    private let chunkSize: Int
    private let chunkCount: Int
    // Guarded by `condition`.
    private let condition = NSCondition()
    /// The first chunk nobody has claimed; every chunk below it is being computed or done.
    private var nextUnclaimed = 0
    /// The chunk the writer takes next: the helper claims nothing at or beyond it plus the allowed lead.
    private var writerAt = 0
    /// Computed chunks the writer has not taken (the helper's), by chunk index.
    private var ready: [Int: [Store.NewDocumentRow?]] = [:]
    private var stopped = false
    /// The chunk the writer is inserting (only the writer reads or writes it).
    private var current: [Store.NewDocumentRow?] = []

    /// A pipeline over `documents`, with its helper thread started when there are at least two chunks;
    /// nil for fewer (the writer computes them inline, as `save` does). `helper: false` (tests) starts no thread,
    /// as if the helper were never scheduled.
    static func start(_ documents: [Document], helper: Bool = true) -> SavePipeline? {
        let chunk = Limits.liteSavePrepareChunk
        guard documents.count >= 2 * chunk else { return nil }
        let pipeline = SavePipeline(documents, chunkSize: chunk)
        guard helper else { return pipeline }
        let thread = Thread { [pipeline] in pipeline.helperMain() }
        thread.name = "settee.lite.save-prepare"
        thread.start()
        return pipeline
    }

    private init(_ documents: [Document], chunkSize: Int) {
        self.documents = documents
        self.chunkSize = chunkSize
        chunkCount = (documents.count + chunkSize - 1) / chunkSize
    }

    /// The row of `documents[index]` (nil: `save` takes its usual path). The writer asks in index order.
    func row(_ index: Int) -> Store.NewDocumentRow? {
        let c = index / chunkSize
        if index % chunkSize == 0 { current = take(chunk: c) }
        let i = index - c * chunkSize
        return i < current.count ? current[i] : nil
    }

    /// How many chunks the helper or the writer has claimed so far (for tests of the helper's lead).
    var claimedChunks: Int {
        condition.lock()
        defer { condition.unlock() }
        return nextUnclaimed
    }

    /// Stops the helper after its current chunk (the writer is done or failed); waiting rows are dropped.
    func stop() {
        condition.lock()
        stopped = true
        ready = [:]
        condition.broadcast()
        condition.unlock()
    }

    /// Chunk `c` for the writer: the helper's when it claimed it (waiting for it if need be), else computed here.
    private func take(chunk c: Int) -> [Store.NewDocumentRow?] {
        condition.lock()
        writerAt = c
        condition.broadcast()
        if c >= nextUnclaimed {
            nextUnclaimed = c + 1
            condition.unlock()
            return compute(chunk: c)
        }
        while true {
            if let rows = ready.removeValue(forKey: c) {
                condition.unlock()
                return rows
            }
            condition.wait()
        }
    }

    private func helperMain() {
        while let c = claim() {
            let rows = compute(chunk: c)
            condition.lock()
            if !stopped { ready[c] = rows }
            condition.broadcast()
            condition.unlock()
        }
    }

    /// The next chunk for the helper, waiting while it is `Limits.liteSavePrepareAhead` chunks ahead of the
    /// writer; nil once every chunk is claimed or the pipeline stopped.
    private func claim() -> Int? {
        condition.lock()
        defer { condition.unlock() }
        while !stopped && nextUnclaimed < chunkCount && nextUnclaimed >= writerAt + Limits.liteSavePrepareAhead {
            condition.wait()
        }
        guard !stopped, nextUnclaimed < chunkCount else { return nil }
        nextUnclaimed += 1
        return nextUnclaimed - 1
    }

    private func compute(chunk c: Int) -> [Store.NewDocumentRow?] {
        let range = c * chunkSize..<min(documents.count, (c + 1) * chunkSize)
        return documents[range].map(Store.newDocumentRow)
    }
}
