import SetteeJSON

/// `_revs_diff` for one document: the revisions the target lacks, and revisions it has that the source
/// may use as `atts_since` (attachments unchanged since them travel as stubs).
public struct RevsDiffEntry: Sendable, Equatable {
    public var missing: [String]
    public var possibleAncestors: [String]

    public init(missing: [String], possibleAncestors: [String] = []) {
        self.missing = missing
        self.possibleAncestors = possibleAncestors
    }
}

public enum RevsDiff {
    /// The request body `{"docid":["rev",...],...}` (documents in the given order).
    public static func requestJSON(_ request: [(String, [String])]) -> JSON {
        .object(request.map { ($0.0, .array($0.1.map(JSON.string))) })
    }

    public static func requestJSON(_ request: [String: [String]]) -> JSON {
        requestJSON(request.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }

    /// Parses a request body; documents whose revisions are not an array of strings are dropped.
    public static func parseRequest(_ json: JSON) throws(ReplicationError) -> [String: [String]] {
        guard let members = json.objectValue else {
            throw ReplicationError.badResponse("_revs_diff body not an object")
        }
        var out: [String: [String]] = [:]
        for (id, revs) in members {
            out[id] = (revs.arrayValue ?? []).compactMap(\.stringValue)
        }
        return out
    }

    /// Parses an answer `{"docid":{"missing":[...],"possible_ancestors":[...]},...}`; documents with
    /// nothing missing are absent from it (and from the result).
    public static func parseAnswer(_ json: JSON) throws(ReplicationError) -> [String: RevsDiffEntry] {
        guard let members = json.objectValue else {
            throw ReplicationError.badResponse("_revs_diff answer not an object")
        }
        var out: [String: RevsDiffEntry] = [:]
        for (id, entry) in members {
            let missing = (entry["missing"]?.arrayValue ?? []).compactMap(\.stringValue)
            guard !missing.isEmpty else { continue }
            out[id] = RevsDiffEntry(
                missing: missing,
                possibleAncestors: (entry["possible_ancestors"]?.arrayValue ?? []).compactMap(\.stringValue))
        }
        return out
    }

    public static func answerJSON(_ answer: [String: RevsDiffEntry]) -> JSON {
        .object(
            answer.sorted { $0.key < $1.key }.map { id, e in
                var o: [(String, JSON)] = [("missing", .array(e.missing.map(JSON.string)))]
                if !e.possibleAncestors.isEmpty {
                    o.append(("possible_ancestors", .array(e.possibleAncestors.map(JSON.string))))
                }
                return (id, .object(o))
            })
    }
}
