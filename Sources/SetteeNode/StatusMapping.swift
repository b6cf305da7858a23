import SetteeClusterMap
import SetteeJSON
import SetteeProtocol
import SetteeStorage

extension EngineError {
    /// The wire status for an engine error.
    var status: Status {
        switch self {
        case .keyNotFound: return .keyNotFound
        case .keyExists: return .keyExists
        case .notStored: return .notStored
        case .deltaBadValue: return .deltaBadValue
        case .valueTooLarge: return .valueTooLarge
        case .temporaryFailure, .wouldBlock: return .temporaryFailure
        case .locked: return .locked
        case .invalidArguments: return .invalidArguments
        case .notMyVBucket: return .notMyVBucket
        case .syncWriteInProgress: return .syncWriteInProgress
        case .ioFailure: return .internalError
        case .persistenceFailing: return .temporaryFailure
        }
    }

    /// The short text memcached puts in an error response body (built once, not per response).
    var message: [UInt8] {
        switch self {
        case .keyNotFound: return ErrorText.notFound
        case .keyExists: return ErrorText.exists
        case .notStored: return ErrorText.notStored
        case .deltaBadValue: return ErrorText.deltaBadValue
        case .valueTooLarge: return ErrorText.tooLarge
        case .temporaryFailure, .wouldBlock: return ErrorText.temporaryFailure
        case .locked: return ErrorText.locked
        case .invalidArguments: return ErrorText.invalidArguments
        case .notMyVBucket: return []
        case .syncWriteInProgress: return ErrorText.syncWriteInProgress
        case .ioFailure: return ErrorText.internalError
        case .persistenceFailing(let reason): return ErrorText.context("the bucket cannot persist: \(reason)")
        }
    }

    /// The status for a durable write that was applied and then failed to become durable: a disk that
    /// cannot persist now may still persist it once it recovers, so the outcome is ambiguous.
    var statusForAppliedWrite: Status {
        if case .persistenceFailing = self { return .syncWriteAmbiguous }
        return status
    }

    /// The datatype of `message`: JSON for an error-context body.
    var messageDatatype: UInt8 {
        if case .persistenceFailing = self { return 1 }
        return 0
    }
}

/// Error-response bodies, as memcached words them.
enum ErrorText {
    static let notFound = Array("Not found".utf8)
    static let exists = Array("Data exists for key.".utf8)
    static let notStored = Array("Not stored.".utf8)
    static let deltaBadValue = Array("Non-numeric server-side value for incr or decr".utf8)
    static let tooLarge = Array("Too large.".utf8)
    static let temporaryFailure = Array("Temporary failure".utf8)
    static let locked = Array("Locked".utf8)
    static let invalidArguments = Array("Invalid arguments".utf8)
    static let internalError = Array("Internal error".utf8)

    /// An error-context body, as kv_engine sends it (datatype JSON): SDKs show `context` with the error.
    static func context(_ text: String) -> [UInt8] {
        let body: JSON = ["error": ["context": .string(text)]]
        return body.serialized()
    }
    static let syncWriteInProgress = Array("Durable write in progress".utf8)
}
