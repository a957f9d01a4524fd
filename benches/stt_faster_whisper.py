"""faster-whisper's side of benches/stt.rs: same model, same WAVs, same thread count.

Usage: python stt_faster_whisper.py MODEL_DIR THREADS COMPUTE_TYPE REPS LANGUAGE SETTINGS WAV...
LANGUAGE "auto" lets faster-whisper detect it. SETTINGS:
- "greedy": beam_size=1, as whisper.cpp's greedy sampler, without timestamps, VAD or
  context: faster-whisper's fastest settings for short commands;
- "defaults": `transcribe` with nothing but the language: beam search 5, best of 5,
  temperature fallback with its compression-ratio and log-probability checks, decoding
  with timestamps;
- "defaults-no-timestamps": the same with `without_timestamps=True`.
Prints one JSON object: load seconds, per-pass seconds (sum over the WAVs), each clip's
seconds in every pass, transcripts, the language of each and the process's peak RSS (KiB).
Audio is decoded before the clock starts, as on the spoke's side.
"""

import json
import resource
import sys
import time

from faster_whisper import WhisperModel, decode_audio


def main():
    model_dir, threads, compute_type, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    language = None if sys.argv[5] == "auto" else sys.argv[5]
    settings = sys.argv[6]
    wavs = sys.argv[7:]
    started = time.perf_counter()
    model = WhisperModel(model_dir, device="cpu", compute_type=compute_type, cpu_threads=threads, num_workers=1)
    load = time.perf_counter() - started
    audios = [decode_audio(w, sampling_rate=16000) for w in wavs]

    def run(audio):
        if settings == "defaults":
            segments, info = model.transcribe(audio, language=language)
        elif settings == "defaults-no-timestamps":
            segments, info = model.transcribe(audio, language=language, without_timestamps=True)
        else:
            segments, info = model.transcribe(
                audio,
                language=language,
                beam_size=1,
                best_of=1,
                temperature=0.0,
                without_timestamps=True,
                condition_on_previous_text=False,
                vad_filter=False,
            )
        # Segments are produced lazily: the work happens while iterating.
        return "".join(s.text for s in segments).strip(), info.language

    run(audios[0])  # warm-up, as on the spoke's side
    passes = []
    clip_secs = []
    texts = []
    languages = []
    for _ in range(reps):
        texts = []
        languages = []
        started = time.perf_counter()
        for audio in audios:
            clip_started = time.perf_counter()
            text, heard = run(audio)
            clip_secs.append(time.perf_counter() - clip_started)
            texts.append(text)
            languages.append(heard)
        passes.append(time.perf_counter() - started)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    json.dump(
        {"load": load, "passes": passes, "clip_secs": clip_secs, "texts": texts, "languages": languages, "rss_kb": rss_kb},
        sys.stdout,
    )


if __name__ == "__main__":
    main()
