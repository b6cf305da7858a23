import Foundation
import SetteeCore
import SetteeJSON

/// The bucket's design documents on disk: `<bucket dir>/views/design-documents.json`.
///
/// Format: first line `settee-ddocs 1 <crc32 hex of the rest>`, then a JSON array of
/// `{"name":N,"body":{...}}`. Written atomically: temp file, fsync, rename, fsync of the directory,
/// so a crash leaves the old or the new set, never a mix; the checksum is verified on every read
/// (a torn or corrupt file is an error, not an empty set).
enum DesignDocumentFile {
    static let fileName = "design-documents.json"
    static let magic = "settee-ddocs 1 "
    /// The most values the file can hold: `Limits.maxDesignDocumentsPerBucket` entries of 4 values around a body
    /// parsed from at most `Limits.maxViewsRequestBody` bytes (one value per two bytes at most, plus one). Above
    /// `Limits.maxJSONValues`, which one design document cannot pass but a bucket's hundred could.
    static let maxValues = Limits.maxDesignDocumentsPerBucket * (Limits.maxViewsRequestBody / 2 + 1 + 4) + 1

    static func load(directory: String) throws(ViewError) -> [DesignDocument] {
        let path = directory + "/" + fileName
        // Only a missing file is "no design documents": one that cannot be read (EIO, EACCES) is an error, or the
        // next PUT would write a set holding only its own document and drop the rest for good.
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            if !FileManager.default.fileExists(atPath: path) { return [] }
            throw .storage("\(path): cannot be read (\(error))")
        }
        let bytes = [UInt8](data)
        guard let newline = bytes.firstIndex(of: 0x0A) else { throw .storage("\(path): no header") }
        let header = String(decoding: bytes[..<newline], as: UTF8.self)
        let body = Array(bytes[(newline + 1)...])
        guard header.hasPrefix(magic), let crc = UInt32(header.dropFirst(magic.count), radix: 16) else {
            throw .storage("\(path): bad header")
        }
        guard CRC32.checksum(body) == crc else { throw .storage("\(path): checksum mismatch") }
        let json: JSON
        do { json = try JSON.parse(body, maxValues: maxValues) } catch { throw .storage("\(path): \(error)") }
        guard case .array(let items) = json else { throw .storage("\(path): not an array") }
        var out: [DesignDocument] = []
        for item in items {
            guard let name = item["name"]?.stringValue, let b = item["body"] else {
                throw .storage("\(path): bad entry")
            }
            out.append(try DesignDocument(name: name, body: b.serialized()))
        }
        return out
    }

    static func save(_ docs: [DesignDocument], directory: String) throws(ViewError) {
        var body: [UInt8] = [UInt8(ascii: "[")]
        for (i, d) in docs.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: #"{"name":"#.utf8)
            JSON.writeString(d.name, into: &body)
            body.append(contentsOf: #","body":"#.utf8)
            body.append(contentsOf: d.body)
            body.append(UInt8(ascii: "}"))
        }
        body.append(UInt8(ascii: "]"))
        let hex = String(CRC32.checksum(body), radix: 16)
        let file = Array((magic + hex + "\n").utf8) + body
        let path = directory + "/" + fileName
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw .storage("open \(tmp): errno \(errno)") }
        let written = file.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd)
        close(fd)
        guard written == file.count, synced == 0 else {
            unlink(tmp)
            throw .storage("write \(tmp) failed: errno \(errno)")
        }
        guard rename(tmp, path) == 0 else { throw .storage("rename \(tmp): errno \(errno)") }
        // The rename is durable only once the directory is: a PUT is answered after this.
        let dfd = open(directory, O_RDONLY)
        guard dfd >= 0 else { throw .storage("open \(directory): errno \(errno)") }
        let dirSynced = fsync(dfd)
        close(dfd)
        guard dirSynced == 0 else { throw .storage("fsync \(directory): errno \(errno)") }
    }
}
