"""faster-whisper's side of benches/stt.rs: same model, same WAVs, same thread count.

Usage: python stt_faster_whisper.py MODEL_DIR THREADS COMPUTE_TYPE REPS WAV...
Prints one JSON object: load seconds, per-pass seconds (sum over the WAVs), transcripts.
Audio is decoded before the clock starts, as on the spoke's side; decoding is greedy
(beam_size=1, as whisper.cpp's greedy sampler), without timestamps, VAD or context:
faster-whisper's fastest settings for short commands.
"""

import json
import sys
import time

from faster_whisper import WhisperModel, decode_audio


def main():
    model_dir, threads, compute_type, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    wavs = sys.argv[5:]
    started = time.perf_counter()
    model = WhisperModel(model_dir, device="cpu", compute_type=compute_type, cpu_threads=threads, num_workers=1)
    load = time.perf_counter() - started
    audios = [decode_audio(w, sampling_rate=16000) for w in wavs]

    def run(audio):
        segments, _ = model.transcribe(
            audio,
            language="en",
            beam_size=1,
            best_of=1,
            temperature=0.0,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        # Segments are produced lazily: the work happens while iterating.
        return "".join(s.text for s in segments).strip()

    run(audios[0])  # warm-up, as on the spoke's side
    passes = []
    texts = []
    for _ in range(reps):
        texts = []
        started = time.perf_counter()
        for audio in audios:
            texts.append(run(audio))
        passes.append(time.perf_counter() - started)
    json.dump({"load": load, "passes": passes, "texts": texts}, sys.stdout)


if __name__ == "__main__":
    main()
